//! The peers part: sqlock beside sqlx's `PgAdvisoryLock`, MariaDB's `GET_LOCK` and
//! the `distributed-lock` crates, each measurement in rounds that alternate the
//! contenders: uncontended cycles, handoff under contention, recovery from a holder
//! process killed, and statements and durable flushes per cycle.

mod crash;
mod cycles;
mod flushes;
mod handoff;
mod setup;

use sqlock::{DbPool, Dialect, TableName};

use crate::args::BenchArgs;
use crate::failure::Failure;
use crate::figures::PeersRun;
use crate::peers::{PeerPools, DISTRIBUTED_LOCK};
use crate::progress::Progress;
use setup::{Setup, SPARE};

pub(crate) use crash::hold;
pub(crate) use setup::WORKERS;

/// Runs the peers part on a server: every measurement, in turn.
pub(crate) async fn peers(
    db: &DbPool,
    url: &str,
    table: &TableName,
    args: &BenchArgs,
    progress: &Progress,
) -> Result<PeersRun, Failure> {
    if db.dialect() == Dialect::Sqlite {
        return Err(Failure::Usage(
            "the peers part needs PostgreSQL or MariaDB: SQLite has no peers to measure".into(),
        ));
    }
    let size = WORKERS[1].max(args.waiters as usize + 1) as u32 + SPARE;
    let s = Setup {
        db,
        url,
        table,
        args,
        progress,
        pools: PeerPools::connect(db, url, size).await?,
    };
    progress.note(&format!(
        "peers: {}",
        s.peers()
            .iter()
            .map(|p| p.label(db.dialect()))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let mut run = PeersRun {
        distributed_lock: DISTRIBUTED_LOCK,
        ..PeersRun::default()
    };
    run.cycles = cycles::cycles(&s).await?;
    run.handoff = handoff::handoff(&s).await?;
    run.crash = crash::crash(&s).await?;
    (run.flushes, run.flush_counter) = flushes::flushes(&s).await?;
    Ok(run)
}
