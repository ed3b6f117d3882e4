//! Uncontended cycles: each worker takes and gives back a key of its own as fast as it
//! can, for every contender with 1 and 8 workers, in rounds that alternate them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlock::{Locker, Strategy};
use tokio::task::JoinSet;

use super::setup::{alternate, key, Setup, WORKERS};
use crate::baseline::statements::RawStatements;
use crate::count::{self, Snapshot};
use crate::failure::Failure;
use crate::figures::{Contender, PeerCycles};
use crate::peers::PeerWorker;
use crate::stats::Samples;
use crate::table::TTL;

/// A contender of the cycles, with the handle its workers' handles are made from.
pub(super) struct Cycler {
    pub(super) who: Contender,
    locker: Option<Locker>,
    raw: Option<Arc<RawStatements>>,
}

impl Cycler {
    /// A worker of this contender.
    pub(super) fn worker(&self, s: &Setup<'_>) -> Result<PeerWorker, Failure> {
        match (&self.locker, &self.raw) {
            (Some(l), _) => Ok(PeerWorker::sqlock(l)),
            (None, Some(stmts)) => {
                let owner = s.builder().build()?.owner().to_string();
                Ok(PeerWorker::raw(stmts.clone(), owner, TTL))
            }
            (None, None) => s.peer(self.who),
        }
    }
}

/// The contenders of the cycles: the library's lease and for-update strategies, the
/// lease statements sent raw, and the peers.
pub(super) fn cyclers(s: &Setup<'_>) -> Result<Vec<Cycler>, Failure> {
    let library = |strategy: Strategy| -> Result<Cycler, Failure> {
        Ok(Cycler {
            who: Contender::Sqlock(strategy.name()),
            locker: Some(s.builder().strategy(strategy).ttl(TTL).build()?),
            raw: None,
        })
    };
    let mut out = vec![
        library(Strategy::Lease)?,
        Cycler {
            who: Contender::Raw,
            locker: None,
            raw: Some(Arc::new(RawStatements::new(s.db.dialect(), s.table)?)),
        },
        library(Strategy::ForUpdate)?,
    ];
    out.extend(s.peers().into_iter().map(|who| Cycler {
        who,
        locker: None,
        raw: None,
    }));
    Ok(out)
}

/// Runs `c` with `n` workers for `d`.
async fn run(s: &Setup<'_>, c: &Cycler, n: usize, d: Duration) -> Result<PeerCycles, Failure> {
    let mut set = JoinSet::new();
    let before = count::snapshot();
    let started = Instant::now();
    let deadline = started + d;
    for i in 0..n {
        let mut w = c.worker(s)?;
        let key = key(c.who, "peers", i);
        let db = s.db.clone();
        set.spawn(async move {
            let (mut ops, mut latency) = (0u64, Samples::default());
            while Instant::now() < deadline {
                match w.cycle(&db, &key).await? {
                    Some(l) => {
                        ops += 1;
                        latency.push(l);
                    }
                    None => {
                        return Err(Failure::Other(format!(
                            "{key:?} was busy in an uncontended cycle"
                        )))
                    }
                }
            }
            Ok::<_, Failure>((ops, latency))
        });
    }
    let mut m = PeerCycles {
        who: c.who,
        workers: n,
        ops: 0,
        secs: 0.0,
        latency: Samples::default(),
        stmts: Snapshot::default(),
    };
    while let Some(joined) = set.join_next().await {
        let (ops, latency) =
            joined.map_err(|e| Failure::Other(format!("a worker failed: {e}")))??;
        m.ops += ops;
        m.latency.extend(&latency);
    }
    m.secs = started.elapsed().as_secs_f64();
    m.stmts = count::snapshot().since(&before);
    Ok(m)
}

/// Every contender with 1 and 8 workers, in rounds that alternate them.
pub(super) async fn cycles(s: &Setup<'_>) -> Result<Vec<PeerCycles>, Failure> {
    let cyclers = cyclers(s)?;
    let args = s.args;
    let warm = (args.duration / 10).clamp(Duration::from_millis(50), Duration::from_millis(300));
    s.progress
        .note("peers: uncontended, warming up (connections opened, statements prepared)");
    for c in &cyclers {
        run(s, c, WORKERS[1], warm).await?;
    }
    let slice = args.duration / args.rounds;
    let mut out = Vec::new();
    for n in WORKERS {
        let mut acc: Vec<Option<PeerCycles>> = vec![None; cyclers.len()];
        for round in 0..args.rounds {
            s.progress.note(&format!(
                "peers: uncontended, {n} worker(s), round {}/{}",
                round + 1,
                args.rounds
            ));
            for i in alternate(cyclers.len(), round) {
                let m = run(s, &cyclers[i], n, slice).await?;
                match &mut acc[i] {
                    Some(a) => {
                        a.ops += m.ops;
                        a.secs += m.secs;
                        a.latency.extend(&m.latency);
                        a.stmts.add(&m.stmts);
                    }
                    None => acc[i] = Some(m),
                }
            }
        }
        out.extend(acc.into_iter().flatten());
    }
    Ok(out)
}
