//! What the measurements of the peers part share: the run's setting, the contenders'
//! workers and keys, and the order of the rounds.

use sqlock::{DbPool, LockerBuilder, TableName};

use crate::args::BenchArgs;
use crate::failure::Failure;
use crate::figures::Contender;
use crate::peers::{PeerPools, PeerWorker};
use crate::progress::Progress;

pub(crate) use crate::figures::PEER_WORKERS as WORKERS;

/// Connections the peers part needs beyond its workers.
pub(super) const SPARE: u32 = 2;

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

/// The order of `n` contenders in round `round`: forward, then backward.
pub(super) fn alternate(n: usize, round: u32) -> Vec<usize> {
    if round % 2 == 0 {
        (0..n).collect()
    } else {
        (0..n).rev().collect()
    }
}
