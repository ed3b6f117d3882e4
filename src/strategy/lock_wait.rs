//! The wait for one lock of any strategy: attempts around the shared [`Wait`] until a
//! grant, the deadline or an error; a fair lock waits in its queue instead
//! (`fair.rs`), bounded by the same wait. A lock request, and each of a read-write
//! writer's two leases, wait through here.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::support::error::{Error, Result};
use crate::support::strategy_kind::Strategy;

use super::attempt::attempt;
use super::fair;
use super::handle::Handle;
use super::held::Held;
use super::lease::Renewal;
use super::wait::{Turn, Wait};
use super::{wait_in_database, Ask, Granted, Hold};
use crate::keepers::server_wait::Started;

/// A grant the wait took: what was granted, when its attempt was sent (the grant is
/// valid until then plus its TTL), and when an attempt last found the lock busy (how
/// soon a freed lock was handed to this waiter).
#[derive(Debug)]
pub(crate) struct Acquired {
    pub(crate) granted: Granted,
    pub(crate) sent: Instant,
    pub(crate) last_busy: Option<Instant>,
    /// The wait in the server that woke this waiter, which keeps the key's wake turn
    /// until the new hold's wake lock is taken (`keepers/server_wait.rs`).
    pub(crate) turn: Option<Started>,
}

impl Acquired {
    /// Starts holding the grant to `ask`, whose acquisition started at `started`: its
    /// hold counted on the handle and kept by the watchdog as `renewal` says, its wait
    /// and handoff metered.
    pub(crate) fn hold(
        self,
        handle: &Arc<Handle>,
        ask: &Ask,
        started: Instant,
        renewal: Renewal,
        at_least: Option<Duration>,
    ) -> Held {
        handle
            .meter
            .granted(ask.strategy, &ask.key, started.elapsed());
        if let Some(busy) = self.last_busy {
            handle.meter.handoff(ask.strategy, &ask.key, busy.elapsed());
        }
        let (hold, id, lost) = Hold::start(handle, ask, self.granted, self.sent, renewal);
        tracing::debug!(token = id.token, "lock granted");
        let held = Held::new(Arc::clone(handle), id, hold, lost, at_least);
        if self.last_busy.is_some() {
            held.contended(self.turn)
        } else {
            held
        }
    }
}

/// Waits for the lock `ask` asks for until `deadline` (for ever without one):
/// [`Error::Timeout`] then, or [`Error::PoolExhausted`] when no attempt ever had a
/// connection. Each busy answer and a timeout are counted on the handle's metrics.
///
/// Cancel safe: an attempt cut off moves to a task of its own, which gives back what
/// it took (`landing.rs`); a fair waiter leaves its queue.
pub(crate) async fn wait(
    handle: &Arc<Handle>,
    ask: &Ask,
    deadline: Option<Instant>,
) -> Result<Acquired> {
    let started = Instant::now();
    let wait = Wait::new(handle, ask.key.clone(), deadline);
    let granted = if ask.strategy == Strategy::Fair {
        // The queue's wait: a grant or an error.
        match fair::acquire(handle, ask, wait, false).await {
            Ok(Some((granted, sent))) => Ok(Acquired {
                granted,
                sent,
                last_busy: None,
                turn: None,
            }),
            Ok(None) => Err(Error::Timeout {
                key: ask.key.clone(),
                waited: started.elapsed(),
            }),
            Err(e) => Err(e),
        }
    } else {
        polled(handle, ask, wait).await
    };
    if let Err(Error::Timeout { .. }) = &granted {
        handle.meter.timed_out(ask.strategy, &ask.key);
        tracing::debug!(waited = ?started.elapsed(), "lock request timed out");
    }
    granted
}

/// [`wait`] for the strategies that poll (lease, insert, for-update): one attempt per
/// turn, a pause between, woken early by a release announced for the key where the
/// handle listens. A for-update attempt may wait in the database a slice of the time
/// left, and goes again at once when that slice ran out.
async fn polled(handle: &Arc<Handle>, ask: &Ask, wait: Wait<'_>) -> Result<Acquired> {
    let mut wait = wait;
    if ask.strategy != Strategy::ForUpdate {
        wait = wait.woken_for(&ask.key).woken_by_holder();
    }
    let dialect = handle.db.dialect();
    let mut last_busy = None;
    loop {
        let in_db = wait_in_database(ask.strategy, dialect, wait.left());
        let outcome = wait
            .attempt(attempt(handle, ask, in_db, wait.reached()))
            .await?;
        match wait.judge(outcome)? {
            Turn::Granted((granted, sent)) => {
                return Ok(Acquired {
                    granted,
                    sent,
                    last_busy,
                    turn: wait.turn(),
                })
            }
            // The attempt waited in the database already: go again at once.
            Turn::Busy if in_db.is_some() => {
                last_busy = Some(busy(handle, ask));
                continue;
            }
            Turn::Busy => last_busy = Some(busy(handle, ask)),
            Turn::Again => continue,
        }
        wait.pause().await?;
    }
}

/// Notes an attempt that found the lock busy; when it answered.
pub(crate) fn busy(handle: &Handle, ask: &Ask) -> Instant {
    handle.meter.busy(ask.strategy, &ask.key);
    tracing::debug!("lock busy");
    Instant::now()
}
