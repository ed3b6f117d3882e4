//! Statements and durable flushes per cycle: one worker cycling on a key of its own,
//! with the server's own flush counter read before and after, for every contender in
//! rounds that alternate them.
//!
//! PostgreSQL counts its WAL syncs in `pg_stat_wal.wal_sync` (PostgreSQL 14 and
//! later); MariaDB its redo log syncs in the status variable `Innodb_os_log_fsyncs`,
//! which MariaDB 10.8 and later no longer have: there `Innodb_data_fsyncs`, every sync
//! InnoDB makes, the redo log's among them. Both count for the whole server, so other work on it only adds: the round with the
//! fewest is the contender's own. The statements are those sqlx reports sending.

use std::time::Duration;

use sqlock::{DbPool, Dialect};

use super::cycles::cyclers;
use super::setup::{alternate, key, Setup};
use crate::count;
use crate::db::{number, texts};
use crate::failure::{db_failure, Failure};
use crate::figures::PeerFlushes;
use crate::peers::{PeerPools, PeerWorker};

/// At most this many rounds, of `--rounds`: each costs two waits for the server.
const MOST_ROUNDS: u32 = 10;
/// The connections of one measurement: its worker's, and the library's spare.
const CONNECTIONS: u32 = 2;
/// How long the server may take to end closed connections and publish their counts.
const EXIT_DELAY: Duration = Duration::from_millis(300);
/// How long closing a measurement's pools may take.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// MariaDB's flush counters, the one wanted first (`ORDER BY ... DESC`).
const MARIADB_COUNTERS: &str = "SELECT VARIABLE_NAME, VARIABLE_VALUE \
     FROM information_schema.GLOBAL_STATUS \
     WHERE VARIABLE_NAME IN ('INNODB_OS_LOG_FSYNCS', 'INNODB_DATA_FSYNCS') \
     ORDER BY VARIABLE_NAME DESC";

/// The server's flush counter now, with its name.
async fn read(db: &DbPool) -> Result<(u64, String), Failure> {
    let (name, value) = match db.dialect() {
        Dialect::Postgres => {
            let sql = "SELECT wal_sync FROM pg_stat_wal";
            let n = number(db, sql.into()).await.map_err(db_failure)?;
            ("pg_stat_wal.wal_sync".to_owned(), n.to_string())
        }
        _ => {
            let names = texts(db, MARIADB_COUNTERS.into(), 0).await;
            let values = texts(db, MARIADB_COUNTERS.into(), 1).await;
            match (names.map_err(db_failure)?, values.map_err(db_failure)?) {
                (n, v) if !n.is_empty() && !v.is_empty() => (n[0].clone(), v[0].clone()),
                _ => return Err(Failure::Other("the server has no flush counter".into())),
            }
        }
    };
    let value = value
        .parse()
        .map_err(|_| Failure::Other(format!("cannot read {name}: {value:?}")))?;
    Ok((value, name))
}

/// One cycle of `w`, which must find the lock free.
async fn once(w: &mut PeerWorker, db: &DbPool, key: &str) -> Result<(), Failure> {
    match w.cycle(db, key).await? {
        Some(_) => Ok(()),
        None => Err(Failure::Other(format!("{key:?} was busy"))),
    }
}

/// Runs `work` with a worker of contender `i` on pools of its own, which are closed
/// afterwards, whatever happened: their connections end, and the server publishes
/// what they did.
async fn on_connections_of_its_own<F, Fut, T>(
    s: &Setup<'_>,
    i: usize,
    work: F,
) -> Result<T, Failure>
where
    F: FnOnce(PeerWorker, DbPool) -> Fut,
    Fut: std::future::Future<Output = Result<T, Failure>>,
{
    let db = crate::connect::connect(s.url, CONNECTIONS).await?;
    let pools = PeerPools::connect(&db, s.url, CONNECTIONS).await?;
    let own = Setup {
        db: &db,
        url: s.url,
        table: s.table,
        args: s.args,
        progress: s.progress,
        pools: pools.clone(),
    };
    let outcome = match cyclers(&own)?.get(i).map(|c| c.worker(&own)) {
        Some(Ok(w)) => work(w, db.clone()).await,
        Some(Err(e)) => Err(e),
        None => Err(Failure::Other("BUG: the contenders changed".into())),
    };
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, pools.close()).await;
    outcome
}

/// Every contender's statements and flushes per cycle; the counter's name.
pub(super) async fn flushes(s: &Setup<'_>) -> Result<(Vec<PeerFlushes>, String), Failure> {
    let cyclers = cyclers(s)?;
    let rounds = s.args.rounds.min(MOST_ROUNDS);
    let cycles = s.args.flush_cycles;
    let mut acc: Vec<PeerFlushes> = cyclers
        .iter()
        .map(|c| PeerFlushes {
            who: c.who,
            cycles,
            statements: 0.0,
            flushes: Vec::new(),
        })
        .collect();
    let mut statements = vec![0u64; cyclers.len()];
    let mut counter = String::new();
    for round in 0..rounds {
        s.progress.note(&format!(
            "peers: statements and flushes, {cycles} cycles each, round {}/{rounds}",
            round + 1
        ));
        for i in alternate(cyclers.len(), round) {
            let key = &key(cyclers[i].who, "flush", 0);
            // The key's row, made once: not counted.
            on_connections_of_its_own(
                s,
                i,
                |mut w, db| async move { once(&mut w, &db, key).await },
            )
            .await?;
            tokio::time::sleep(EXIT_DELAY).await;
            let (before, name) = read(s.db).await?;
            counter = name;
            let sent = on_connections_of_its_own(s, i, |mut w, db| async move {
                // The connection and its prepared statements: not counted.
                once(&mut w, &db, key).await?;
                let counted = count::snapshot();
                for _ in 0..cycles {
                    once(&mut w, &db, key).await?;
                }
                Ok(count::snapshot().since(&counted).total())
            })
            .await?;
            statements[i] += sent;
            tokio::time::sleep(EXIT_DELAY).await;
            let (after, _) = read(s.db).await?;
            acc[i]
                .flushes
                .push(after.saturating_sub(before) as f64 / cycles as f64);
        }
    }
    for (f, n) in acc.iter_mut().zip(statements) {
        f.statements = n as f64 / (cycles * u64::from(rounds)) as f64;
    }
    Ok((acc, counter))
}
