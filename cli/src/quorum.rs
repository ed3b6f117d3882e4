//! `sqlock run` over several databases: given `--database-url` three times or more,
//! the command runs under a quorum lock (`sqlock::Quorum`), held on a majority of
//! those independent databases, with the quorum's fencing token in its environment.
//! Everything else about the run (the process group, signals, the lost signal, the
//! watcher) is `run.rs`'s.

use sqlock::{Quorum, Strategy, MIN_QUORUM_MEMBERS};

use crate::args::{Cli, Command, RunArgs};
use crate::connect::{self, open, Opening, CLOSE_TIMEOUT};
use crate::failure::Failure;
use crate::held::Target;
use crate::{quorum_view, run};

/// Runs `cli`, a command given several `--database-url`: `run` under the quorum lock,
/// `status` and `list` as each database sees them (`quorum_view.rs`); anything else
/// is a usage error, before any connection.
pub(crate) async fn dispatch(cli: Cli) -> Result<i32, Failure> {
    let urls = cli.database_url;
    let enough = || {
        if urls.len() < MIN_QUORUM_MEMBERS {
            return Err(Failure::Usage(format!(
                "a quorum lock needs at least {MIN_QUORUM_MEMBERS} independent databases \
                 (--database-url {MIN_QUORUM_MEMBERS} times or more), and {} were given",
                urls.len()
            )));
        }
        Ok(())
    };
    let pooling = cli.transaction_pooling || connect::transaction_pooling_from_env();
    let args = match cli.command {
        Command::Run(args) => {
            enough()?;
            args
        }
        Command::Status { key, json } => {
            enough()?;
            let views = quorum_view::open_all(&urls, &cli.table, pooling).await?;
            let outcome = quorum_view::status(&views, &key, json).await;
            quorum_view::close_all(views).await;
            return outcome;
        }
        Command::List { json } => {
            enough()?;
            let views = quorum_view::open_all(&urls, &cli.table, pooling).await?;
            let outcome = quorum_view::list_all(&views, json).await;
            quorum_view::close_all(views).await;
            return outcome;
        }
        _ => {
            return Err(Failure::Usage(
                "--database-url is given several times only to `run`, which then runs its \
                 command under a quorum lock of those databases, and to `status` and \
                 `list`, which show each database's view; give the other commands one \
                 database"
                    .into(),
            ))
        }
    };
    check(&args)?;
    let how = Opening {
        pooling,
        creates: true,
        holds: true,
        presence: !cli.no_presence && !connect::no_presence_from_env(),
        migrates: false,
    };
    let mut pools = Vec::with_capacity(urls.len());
    let mut members = Vec::with_capacity(urls.len());
    for url in &urls {
        let database = connect::database(Some(url))?;
        run::check(&args, connect::dialect(&database.url)?)?;
        // A database that cannot be reached is one the quorum does without, as long
        // as a majority can be: its member fails each of its steps meanwhile.
        match open(&database, &cli.table, how).await {
            Ok((pool, locker)) => {
                pools.push(pool);
                members.push(locker);
            }
            Err(Failure::Unavailable(why)) => {
                eprintln!("sqlock: {why}; the quorum goes on without it");
                members.push(unreachable(&database, &cli.table)?);
            }
            Err(other) => return Err(other),
        }
    }
    let quorum = Quorum::new(members)?;
    let outcome = run::run(Target::Quorum(&quorum), args).await;
    drop(quorum);
    for pool in pools {
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, pool.close()).await;
    }
    outcome
}

/// What a quorum lock is not: the options of the other primitives.
fn check(args: &RunArgs) -> Result<(), Failure> {
    if args.limit.is_some() || args.shared || args.exclusive || args.strategy() != Strategy::Lease {
        return Err(Failure::Usage(
            "a quorum lock is a lease on each database: --limit, --shared, --exclusive, \
             --fair and --strategy other than lease go with one --database-url"
                .into(),
        ));
    }
    Ok(())
}

/// A member for a database that could not be reached when the run started: a handle
/// whose pool connects lazily, so that each of its steps fails (and counts as not
/// answering) until the database is back.
fn unreachable(
    database: &connect::Database,
    table: &sqlock::TableName,
) -> Result<sqlock::Locker, Failure> {
    let pool = connect::lazy(database)?;
    Ok(sqlock::Locker::builder(pool)
        .table(table.as_str())
        .build()?)
}
