//! Where the database is and how the tool connects to it.
//!
//! The URL comes from the flag, the environment, or the embedded SQLite default (one
//! file per user, wherever the tool is started); its scheme picks the sqlx pool type. The pools are set for a short-lived tool: a few
//! connections, no ping before each use, and a bounded connect whose failure names
//! its cause. A SQLite file is created only for the commands that take locks; the
//! others read a missing file as an empty database.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use sqlock::{DbPool, Dialect, Locker};
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::{ConnectOptions, Connection as _};

use crate::failure::Failure;

/// Where root's default database lives: one file for the machine's root jobs.
pub const ROOT_DEFAULT_DATABASE: &str = "/var/lib/sqlock/sqlock.db";

/// Where another user's default database lives, under their home directory: the XDG
/// state directory's default place. `XDG_STATE_HOME` is not read: cron does not set
/// it, so a shell that does would find another file than the user's cron jobs.
pub const USER_DEFAULT_DATABASE: &str = ".local/state/sqlock/sqlock.db";

/// How long connecting may take before the database counts as unreachable; also how
/// long a statement waits for a pooled connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long SQLite waits for another process's write before reporting it busy.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// A holder needs one connection for its statements and the watchdog's renewals, and
/// a for-update lock one more for its transaction; a few spare ones cost nothing.
const MAX_CONNECTIONS: u32 = 4;

/// Where the database is: a URL given by `--database-url`, `SQLOCK_DATABASE_URL` or
/// `DATABASE_URL`, or the embedded default file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Database {
    /// The URL connected to.
    pub url: String,
    /// The default file, when no URL was given: its folder is made on first use.
    pub default_file: Option<PathBuf>,
}

/// The URL from `--database-url`, else `SQLOCK_DATABASE_URL`, else `DATABASE_URL`,
/// else the default file ([`default_database`]).
pub fn database(flag: Option<&str>) -> Result<Database, Failure> {
    let given = flag
        .map(str::to_owned)
        .or_else(|| std::env::var("SQLOCK_DATABASE_URL").ok())
        .or_else(|| std::env::var("DATABASE_URL").ok());
    if let Some(url) = given {
        return Ok(Database {
            url,
            default_file: None,
        });
    }
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let file = default_database(nix::unistd::geteuid().is_root(), home.as_deref())?;
    Ok(Database {
        url: format!("sqlite:{}", file.display()),
        default_file: Some(file),
    })
}

/// The default database file, the same whatever the working directory, so that a cron
/// job and a shell of one user lock through one file: [`ROOT_DEFAULT_DATABASE`] for
/// root, [`USER_DEFAULT_DATABASE`] under `home` for anybody else.
pub fn default_database(root: bool, home: Option<&Path>) -> Result<PathBuf, Failure> {
    if root {
        return Ok(PathBuf::from(ROOT_DEFAULT_DATABASE));
    }
    match home {
        Some(home) if home.is_absolute() => Ok(home.join(USER_DEFAULT_DATABASE)),
        _ => Err(Failure::Usage(format!(
            "no database given and no home directory to keep the default one in \
             (HOME is unset or relative): pass --database-url or set SQLOCK_DATABASE_URL \
             (the default is $HOME/{USER_DEFAULT_DATABASE}, {ROOT_DEFAULT_DATABASE} for root)"
        ))),
    }
}

/// Makes the folder of the default database file, when it is missing.
fn make_folder(file: &Path) -> Result<(), Failure> {
    let Some(dir) = file.parent() else {
        return Ok(());
    };
    std::fs::create_dir_all(dir).map_err(|e| {
        Failure::Unavailable(format!(
            "cannot make {} for the default database: {e} (pass --database-url to use \
             another)",
            dir.display()
        ))
    })
}

/// The dialect of a URL; an unknown scheme is a usage error.
pub fn dialect(url: &str) -> Result<Dialect, Failure> {
    Dialect::from_url(url).ok_or_else(|| {
        Failure::Usage(format!(
            "unsupported database url {:?}: expected postgres://, mysql:// or sqlite:",
            redact(url)
        ))
    })
}

/// Whether `SQLOCK_TRANSACTION_POOLING` asks for the transaction-pooling mode (`1` or
/// `true`), as `--transaction-pooling` does.
pub fn transaction_pooling_from_env() -> bool {
    std::env::var("SQLOCK_TRANSACTION_POOLING")
        .is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// Whether `SQLOCK_NO_PRESENCE` turns presence off (`1` or `true`), as `--no-presence`
/// does.
pub fn no_presence_from_env() -> bool {
    std::env::var("SQLOCK_NO_PRESENCE").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// Connects to `url`; behind a transaction-pooling proxy (`pooling`) without sqlx's
/// statement cache, so that no statement sqlx sends itself is named either.
///
/// On a server, one connection is made directly first: a pool retries a refused
/// connection until its timeout and then reports only that it timed out, while the
/// direct attempt fails at once with its cause. The pool then connects lazily.
///
/// A SQLite file that does not exist is created when `create` says so; otherwise the
/// pool is an empty in-memory database instead, which answers as an empty table would
/// (no locks held, nothing to release or sweep) and leaves no file behind.
pub async fn connect(db: &Database, pooling: bool, create: bool) -> Result<DbPool, Failure> {
    if create {
        if let Some(file) = &db.default_file {
            make_folder(file)?;
        }
    }
    connect_with(&db.url, MAX_CONNECTIONS, pooling, create).await
}

/// A pool on the server of `db` that connects only when it is used, without the
/// first connection [`connect`] makes: for a database a quorum goes on without, whose
/// every statement fails until it is back. A SQLite file is opened by [`connect`] only.
pub fn lazy(db: &Database) -> Result<DbPool, Failure> {
    let url = db.url.as_str();
    let bad_url =
        |e: sqlx::Error| Failure::Usage(format!("invalid database url {:?}: {e}", redact(url)));
    Ok(match dialect(url)? {
        Dialect::Postgres => PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .test_before_acquire(false)
            .acquire_timeout(CONNECT_TIMEOUT)
            .connect_lazy_with(PgConnectOptions::from_str(url).map_err(bad_url)?)
            .into(),
        Dialect::MySql => MySqlPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .test_before_acquire(false)
            .acquire_timeout(CONNECT_TIMEOUT)
            .connect_lazy_with(MySqlConnectOptions::from_str(url).map_err(bad_url)?)
            .into(),
        _ => {
            return Err(Failure::Unavailable(format!(
                "cannot open the SQLite database {:?}",
                redact(url)
            )))
        }
    })
}

async fn connect_with(
    url: &str,
    max_connections: u32,
    pooling: bool,
    create: bool,
) -> Result<DbPool, Failure> {
    let bad_url =
        |e: sqlx::Error| Failure::Usage(format!("invalid database url {:?}: {e}", redact(url)));
    Ok(match dialect(url)? {
        Dialect::Postgres => {
            let mut options = PgConnectOptions::from_str(url).map_err(bad_url)?;
            if pooling {
                // Named statements stay on the server connection that prepared them,
                // which the proxy hands to someone else after each transaction.
                options = options.statement_cache_capacity(0);
            }
            probe(url, &options).await?;
            PgPoolOptions::new()
                .max_connections(max_connections)
                .test_before_acquire(false)
                .acquire_timeout(CONNECT_TIMEOUT)
                .connect_lazy_with(options)
                .into()
        }
        Dialect::MySql => {
            let options = MySqlConnectOptions::from_str(url).map_err(bad_url)?;
            probe(url, &options).await?;
            MySqlPoolOptions::new()
                .max_connections(max_connections)
                .test_before_acquire(false)
                .acquire_timeout(CONNECT_TIMEOUT)
                .connect_lazy_with(options)
                .into()
        }
        Dialect::Sqlite => {
            let options = SqliteConnectOptions::from_str(url)
                .map_err(bad_url)?
                .create_if_missing(create)
                // Several processes share the file: readers must not block the writer,
                // and a writer waits for another rather than failing at once.
                .journal_mode(SqliteJournalMode::Wal)
                .busy_timeout(SQLITE_BUSY_TIMEOUT);
            let file = options.get_filename().to_owned();
            // Eager: opening a local file fails at once, with its cause.
            match sqlite_pool(options, max_connections).await {
                Ok(pool) => pool.into(),
                // Asked afterwards, so that an in-memory URL (never missing) and a file
                // that cannot be opened for another reason keep their own answers.
                Err(_) if !create && !file.exists() => {
                    eprintln!(
                        "sqlock: no database at {} yet: answering as for an empty one \
                         (`sqlock run` or `sqlock migrate` creates it)",
                        file.display()
                    );
                    let empty =
                        SqliteConnectOptions::from_str("sqlite::memory:").map_err(bad_url)?;
                    sqlite_pool(empty, 1)
                        .await
                        .map_err(|e| unreachable(url, &e))?
                        .into()
                }
                Err(e) => return Err(unreachable(url, &e)),
            }
        }
        // A dialect a newer library knows and this tool does not.
        other => {
            return Err(Failure::Usage(format!(
                "the {other} dialect is not supported"
            )))
        }
    })
}

/// The pool on a SQLite file, its first connection opened. Opening can meet the file
/// busy without waiting (another process switching it to WAL, or recovering its WAL,
/// at the same moment: SQLite answers `SQLITE_BUSY` then rather than calling the busy
/// handler), so a busy answer is tried again, for up to [`CONNECT_TIMEOUT`]: processes
/// started together on one file, cron jobs of the same minute, all get in.
async fn sqlite_pool(
    options: SqliteConnectOptions,
    max_connections: u32,
) -> Result<sqlx::SqlitePool, sqlx::Error> {
    let started = std::time::Instant::now();
    let mut pause = Duration::from_millis(5);
    loop {
        let opened = SqlitePoolOptions::new()
            .max_connections(max_connections)
            .test_before_acquire(false)
            .acquire_timeout(CONNECT_TIMEOUT)
            .connect_with(options.clone())
            .await;
        match opened {
            Err(e) if is_busy(&e) && started.elapsed() + pause < CONNECT_TIMEOUT => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(200));
            }
            opened => return opened,
        }
    }
}

/// Whether SQLite answered that the file is busy (`SQLITE_BUSY` and its extended
/// codes: the primary code is the low byte).
fn is_busy(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => db
            .code()
            .and_then(|c| c.parse::<i32>().ok())
            .is_some_and(|c| c & 0xff == 5),
        _ => false,
    }
}

/// One direct connection, closed again, to learn whether the server can be used.
async fn probe<O>(url: &str, options: &O) -> Result<(), Failure>
where
    O: ConnectOptions,
    O::Connection: Sized,
{
    match tokio::time::timeout(CONNECT_TIMEOUT, options.connect()).await {
        Ok(Ok(conn)) => {
            // Closing politely is a courtesy to the server; failing to is no error.
            let _ = conn.close().await;
            Ok(())
        }
        Ok(Err(e)) => Err(unreachable(url, &e)),
        Err(_) => Err(Failure::Unavailable(format!(
            "cannot connect to {}: no answer within {}s",
            redact(url),
            CONNECT_TIMEOUT.as_secs()
        ))),
    }
}

fn unreachable(url: &str, e: &sqlx::Error) -> Failure {
    Failure::Unavailable(format!(
        "cannot connect to {}: {}",
        redact(url),
        crate::failure::describe(e)
    ))
}

/// The URL without its password, for messages.
pub(crate) fn redact(url: &str) -> String {
    // scheme://user:password@host/...: cut what lies between the first ':' after the
    // scheme's "//" and the '@'.
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((userinfo, host)) = rest.split_once('@') else {
        return url.to_owned();
    };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_owned(),
    }
}

/// How long closing the pool may take before the tool exits anyway.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);
/// How a command opens a database: what it does there.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Opening {
    /// Through a transaction-pooling proxy.
    pub(crate) pooling: bool,
    /// It may create a SQLite file that does not exist.
    pub(crate) creates: bool,
    /// It holds a lock (`run`, `elect`).
    pub(crate) holds: bool,
    /// Presence where it is safe (not turned off).
    pub(crate) presence: bool,
    /// It is `migrate`, which makes the table itself.
    pub(crate) migrates: bool,
}

/// Connects to `database` and makes the handle a command uses there: its pool, and a
/// handle on `table` with what the command needs (wake-ups and presence for one that
/// holds, where they work), the table made on SQLite.
pub(crate) async fn open(
    database: &Database,
    table: &sqlock::TableName,
    how: Opening,
) -> Result<(DbPool, Locker), Failure> {
    let pool = connect(database, how.pooling, how.creates).await?;
    // On PostgreSQL, where notifications can work: an operator's revocation of the
    // lock a `run` or `elect` holds reaches it at once rather than at its next renewal,
    // a resignation wakes the other candidates at once rather than at their next poll,
    // and a fair waiter is woken by the notification naming it (a transaction-pooling
    // proxy cannot deliver them).
    let mut builder = Locker::builder(pool.clone())
        .table(table.as_str())
        .transaction_pooling(how.pooling);
    if how.holds && pool.dialect() == Dialect::Postgres && !how.pooling {
        builder = builder.notify_waiters(true);
    }
    let mut locker = builder.clone().build()?;
    if how.holds && how.presence {
        // Presence where it is safe: the check asks the server once (a Galera node
        // says no), and a server that cannot be asked is left to the commands.
        if locker.check_presence().await.is_ok() {
            locker = builder.presence(true).build()?;
        }
    }
    if pool.dialect() == Dialect::Sqlite && !how.migrates {
        // The embedded default needs no set-up step. Servers never get tables made
        // behind the operator's back: there a missing table is an error.
        locker.create_table().await?;
    }
    Ok((pool, locker))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_stay_out_of_messages() {
        assert_eq!(
            redact("postgres://app:s3cret@db/app"),
            "postgres://app:***@db/app"
        );
        assert_eq!(redact("mysql://root@db/app"), "mysql://root@db/app");
        assert_eq!(redact("sqlite:locks.db"), "sqlite:locks.db");
    }

    #[test]
    fn the_default_database_is_one_file_per_user_wherever_the_tool_starts() {
        assert_eq!(
            default_database(true, Some(Path::new("/home/ann"))).ok(),
            Some(PathBuf::from("/var/lib/sqlock/sqlock.db"))
        );
        assert_eq!(
            default_database(false, Some(Path::new("/home/ann"))).ok(),
            Some(PathBuf::from("/home/ann/.local/state/sqlock/sqlock.db"))
        );
        for home in [None, Some(Path::new("relative/home"))] {
            match default_database(false, home) {
                Err(Failure::Usage(m)) => assert!(m.contains("--database-url"), "{m}"),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn unknown_schemes_are_usage_errors() {
        assert!(matches!(dialect("oracle://db"), Err(Failure::Usage(_))));
        assert!(matches!(dialect("locks.db"), Err(Failure::Usage(_))));
        assert_eq!(dialect("sqlite:x.db").ok(), Some(Dialect::Sqlite));
    }
}
