//! Handoff under contention: one holder and `--waiters` waiters on one key, for every
//! contender, in rounds that alternate them; from the holder's release to the next
//! holder's grant.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlock::{Dialect, Locker, Strategy};
use tokio::task::JoinSet;

use super::setup::{alternate, key, Setup};
use crate::failure::Failure;
use crate::figures::{Contender, PeerHandoff};
use crate::parts::contended::{Handoff, FOR_UPDATE_GRACE};
use crate::peers::PeerWorker;
use crate::table::TTL;

/// A contender of the handoff: the library as a handle makes it, or a peer.
struct Handing {
    who: Contender,
    locker: Option<Locker>,
    /// How long a wait may run past the end of the round (see [`FOR_UPDATE_GRACE`]):
    /// waiters that wait in the server, rather than by polling, hand the lock on after
    /// the end instead of giving up.
    grace: Duration,
    /// Each worker a handle on a pool of its own that connects unlike the others, as in
    /// a process of its own (this process's wake-ups never reach it), with the library's
    /// defaults but this many waits in the server: `None` for the handles of `locker`.
    apart: Option<u32>,
}

/// The contenders: the library's lease polling (and, on PostgreSQL, woken by the
/// release), fair (likewise) and for-update strategies, and the peers, which all wait
/// in the server.
fn handings(s: &Setup<'_>) -> Result<Vec<Handing>, Failure> {
    let poll = s.args.poll;
    let lease = s.builder().strategy(Strategy::Lease).ttl(TTL);
    let mut out = vec![Handing {
        who: Contender::Sqlock("lease, polling"),
        locker: Some(lease.clone().poll_interval(poll, poll).build()?),
        grace: Duration::ZERO,
        apart: None,
    }];
    // Waiters in other processes, at the library's defaults: woken by the holder's wake
    // lock on the servers, and the same without waits in the server (polling alone).
    out.push(Handing {
        who: Contender::Sqlock("lease, processes apart"),
        locker: None,
        grace: FOR_UPDATE_GRACE,
        apart: Some(sqlock::DEFAULT_SERVER_WAITS),
    });
    out.push(Handing {
        who: Contender::Sqlock("lease, processes apart, polling"),
        locker: None,
        grace: Duration::ZERO,
        apart: Some(0),
    });
    if s.db.dialect() == Dialect::Postgres {
        out.push(Handing {
            who: Contender::Sqlock("lease, notify"),
            locker: Some(lease.notify_waiters(true).build()?),
            grace: Duration::ZERO,
            apart: None,
        });
    }
    // The fair strategy: each release hands the lock to the first waiter; the first
    // waiter polls, and on PostgreSQL is woken by the notification naming it.
    let fair = s.builder().strategy(Strategy::Fair).ttl(TTL);
    out.push(Handing {
        who: Contender::Sqlock("fair, polling"),
        locker: Some(fair.clone().poll_interval(poll, poll).build()?),
        grace: Duration::ZERO,
        apart: None,
    });
    if s.db.dialect() == Dialect::Postgres {
        out.push(Handing {
            who: Contender::Sqlock("fair, notify"),
            locker: Some(fair.notify_waiters(true).build()?),
            grace: Duration::ZERO,
            apart: None,
        });
    }
    out.push(Handing {
        who: Contender::Sqlock("for-update"),
        locker: Some(s.builder().strategy(Strategy::ForUpdate).build()?),
        grace: FOR_UPDATE_GRACE,
        apart: None,
    });
    out.extend(s.peers().into_iter().map(|who| Handing {
        who,
        locker: None,
        grace: FOR_UPDATE_GRACE,
        apart: None,
    }));
    Ok(out)
}

/// One worker: take, hold, release, let another take it; until the end.
async fn contend(
    h: Arc<Handoff>,
    me: usize,
    key: String,
    hold: Duration,
    grace: Duration,
    mut w: PeerWorker,
) -> Result<(), Failure> {
    let mut rx = h.subscribe();
    loop {
        let now = Instant::now();
        if now >= h.deadline() {
            return Ok(());
        }
        if !w.acquire(&key, h.deadline() - now + grace).await? {
            return Ok(());
        }
        let seen = h.granted(me);
        // Past the end, the waiters left only pass the lock on, as fast as they can.
        if Instant::now() < h.deadline() && !hold.is_zero() {
            tokio::time::sleep(hold).await;
        }
        h.releasing(me);
        w.release(&key).await?;
        h.wait_for_other(&mut rx, seen).await;
    }
}

/// Every contender, `--waiters` + 1 workers on one key, in alternating rounds.
pub(super) async fn handoff(s: &Setup<'_>) -> Result<Vec<PeerHandoff>, Failure> {
    let args = s.args;
    let handings = handings(s)?;
    let workers = args.waiters as usize + 1;
    let slice = args.contended_duration / args.rounds;
    let mut acc: Vec<Option<PeerHandoff>> = vec![None; handings.len()];
    for round in 0..args.rounds {
        s.progress.note(&format!(
            "peers: handoff, {} waiters on one key, round {}/{}",
            args.waiters,
            round + 1,
            args.rounds
        ));
        for i in alternate(handings.len(), round) {
            let c = &handings[i];
            let key = key(c.who, "handoff", 0);
            let mut ws = Vec::with_capacity(workers);
            for me in 0..workers {
                ws.push(match (&c.locker, c.apart) {
                    (Some(l), _) => PeerWorker::sqlock(l),
                    (None, Some(waits)) => {
                        let pool = crate::connect::apart(s.db, me).await?;
                        let l = Locker::builder(pool)
                            .table(s.table.as_str())
                            .strategy(Strategy::Lease)
                            .ttl(TTL)
                            .server_waits(waits)
                            .build()?;
                        PeerWorker::sqlock(&l)
                    }
                    (None, None) => s.peer(c.who)?,
                });
            }
            let h = Handoff::new(Instant::now() + slice);
            let mut set = JoinSet::new();
            for (me, w) in ws.into_iter().enumerate() {
                set.spawn(contend(h.clone(), me, key.clone(), args.hold, c.grace, w));
            }
            while let Some(joined) = set.join_next().await {
                joined.map_err(|e| Failure::Other(format!("a worker failed: {e}")))??;
            }
            let (grants, handoff) = h.finish();
            match &mut acc[i] {
                Some(a) => {
                    a.grants += grants;
                    a.secs += slice.as_secs_f64();
                    a.handoff.extend(&handoff);
                }
                None => {
                    acc[i] = Some(PeerHandoff {
                        who: c.who,
                        workers,
                        grants,
                        secs: slice.as_secs_f64(),
                        handoff,
                    })
                }
            }
        }
    }
    Ok(acc.into_iter().flatten().collect())
}
