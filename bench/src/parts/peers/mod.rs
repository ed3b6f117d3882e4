//! The peers part: sqlock beside sqlx's `PgAdvisoryLock`, MariaDB's `GET_LOCK` and
//! the `distributed-lock` crates, each measurement in rounds that alternate the
//! contenders: uncontended cycles, handoff under contention, recovery from a holder
//! process killed, and statements and durable flushes per cycle.

mod crash;
mod cycles;
mod flushes;
mod handoff;

use sqlock::{DbPool, Dialect, LockerBuilder, TableName};

use crate::args::BenchArgs;
use crate::failure::Failure;
use crate::figures::{Contender, PeersRun};
use crate::peers::{PeerPools, PeerWorker, DISTRIBUTED_LOCK};
use crate::progress::Progress;

pub(crate) use crash::hold;

pub(crate) use crate::figures::PEER_WORKERS as WORKERS;

/// Connections the peers part needs beyond its workers.
const SPARE: u32 = 2;

/// What the peers part's measurements share.
pub(crate) struct Setup<'a> {
    pub(crate) db: &'a DbPool,
    pub(crate) url: &'a str,
    pub(crate) table: &'a TableName,
    pub(crate) args: &'a BenchArgs,
    pub(crate) progress: &'a Progress,
    pub(crate) pools: PeerPools,
}

impl Setup<'_> {
    /// A builder of the library on the run's table.
    pub(crate) fn builder(&self) -> LockerBuilder {
        sqlock::Locker::builder(self.db.clone()).table(self.table.as_str())
    }

    /// The peers this database has, in this build.
    pub(crate) fn peers(&self) -> Vec<Contender> {
        [
            Contender::Advisory,
            Contender::GetLock,
            Contender::DistributedLock,
        ]
        .into_iter()
        .filter(|&c| PeerWorker::peer(c, &self.pools).is_some())
        .collect()
    }

    /// A worker of the peer `who`.
    pub(crate) fn peer(&self, who: Contender) -> Result<PeerWorker, Failure> {
        PeerWorker::peer(who, &self.pools)
            .ok_or_else(|| Failure::Other(format!("BUG: no worker for {who:?}")))
    }
}

/// A short name of a contender, for its keys and the holder process's command line.
pub(crate) fn slug(who: Contender) -> &'static str {
    match who {
        Contender::Sqlock(v) => v,
        Contender::Raw => "raw",
        Contender::Advisory => "advisory",
        Contender::GetLock => "get-lock",
        Contender::DistributedLock => "distributed-lock",
    }
}

/// A key of the benchmark's for contender `who`, part `part`, worker `i`.
pub(crate) fn key(who: Contender, part: &str, i: usize) -> String {
    let slug: String = slug(who)
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("{}{part}-{slug}-{i}", crate::table::KEY_PREFIX)
}

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
