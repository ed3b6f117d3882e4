//! The watchdog: one background task per lock table handle that keeps its held leases
//! alive and tells their holders when one is lost.
//!
//! Leases are grouped by TTL; every tick of a group renews all of its leases with one
//! statement (two on MariaDB when some were lost). A lease is lost when a renewal finds
//! it no longer ours (released by force, taken after it lapsed, its row deleted, or
//! revoked by an operator: then one more read, sent only when a renewal lost some,
//! tells its holder so), or when renewals keep failing until, on the local monotonic
//! clock, the lease may have lapsed. A failed renewal followed by a successful one
//! before then is no loss. A group can be renewed at once, ahead of its tick
//! ([`State::check_now`]): on PostgreSQL the release listener asks it when an operator
//! revokes a lease the handle holds.
//!
//! The local count is kept as the latest instant the lease is surely valid until: for
//! each statement the database confirmed (the acquisition, a renewal, an extension, a
//! re-entry), the instant it was *sent* plus the TTL it asked for. The database never
//! shortens a lease (renewals and extensions keep a later expiry), so the expiry it
//! holds is never earlier than that instant, and the lost signal, which fires there,
//! never fires after another owner could be granted the key.
//!
//! With presence, the watchdog renews as without it: the handle's presence tasks
//! (`keepers/presence.rs`) learn when the marker changes connections, and check the
//! leases that record it themselves; a lease granted under an earlier epoch than the
//! current one is checked as it registers.

pub(crate) mod leases;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Instrument;

use crate::db::statement::batch_json;
use crate::db::values::Renew;
use crate::db::Db;
use crate::support::lost::LostSignal;
use crate::support::metrics::Meter;

use super::presence::Presence;

use self::leases::Batch;
pub(crate) use self::leases::{State, Track};

/// Counters of a handle's watchdog, for metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WatchdogStats {
    /// Ticks that renewed at least one lease.
    pub ticks: u64,
    /// Statements those ticks sent.
    pub statements: u64,
    /// Leases renewed, summed over ticks.
    pub renewed: u64,
    /// Ticks whose renewal failed (an error or no answer in time).
    pub failed_ticks: u64,
    /// Leases found lost.
    pub lost: u64,
}

/// The watchdog of one handle: the leases it tracks, shared with its task, and what
/// the task renews them with. Dropping it ends the task.
#[derive(Debug)]
pub(crate) struct Watchdog {
    state: Arc<State>,
    target: Target,
}

/// What the renewals are sent with: the handle's backend and owner, and its
/// presence, when it has one (told of leases of an earlier epoch).
#[derive(Debug, Clone)]
struct Target {
    db: Db,
    owner: String,
    presence: Option<Arc<Presence>>,
}

impl Watchdog {
    /// A watchdog that renews on `db` as `owner`, every `interval` (by default a third
    /// of each lease's TTL). Its task starts with the first lease. With `presence`, the
    /// task checks the handle's presence session at each tick. `meter`: the handle's
    /// metrics.
    pub(crate) fn new(
        interval: Option<Duration>,
        db: Db,
        owner: String,
        presence: Option<Arc<Presence>>,
        meter: Meter,
    ) -> Self {
        let state = Arc::new(State::new(interval, meter, owner.clone()));
        if let Some(p) = &presence {
            p.attach(Arc::downgrade(&state));
        }
        Self {
            state,
            target: Target {
                db,
                owner,
                presence,
            },
        }
    }

    /// The tracked leases, for the release listener to ask for an early renewal
    /// ([`State::check_now`]) without keeping them alive.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn state(&self) -> Weak<State> {
        Arc::downgrade(&self.state)
    }

    /// Starts tracking one hold of `key`, and returns its lost signal and the
    /// registration id to unregister with.
    pub(crate) fn register(&self, key: &str, token: i64, t: Track) -> (LostSignal, u64) {
        let registered = self.state.track(key, token, t);
        // Granted under an earlier epoch of the handle's presence: the marker changed
        // connections since, and may have been free meanwhile. The presence's checker
        // may have looked at the leases before this one registered: it looks again.
        if let (Some(p), Some(epoch)) = (&self.target.presence, t.presence) {
            if epoch < p.epoch() {
                p.check_soon();
            }
        }
        if !self.state.started.swap(true, Ordering::AcqRel) {
            let wake = self.state.wake.clone();
            tokio::spawn(run(Arc::downgrade(&self.state), wake, self.target.clone()));
        } else {
            self.state.wake.notify_one();
        }
        registered
    }
}

impl std::ops::Deref for Watchdog {
    type Target = State;

    fn deref(&self) -> &State {
        &self.state
    }
}

/// The watchdog task of one handle. It holds the state weakly, so that dropping the
/// handle and its guards ends it.
async fn run(weak: Weak<State>, wake: Arc<Notify>, target: Target) {
    loop {
        let next = {
            let Some(state) = weak.upgrade() else {
                return;
            };
            let (due, next_tick) = state.due(Instant::now());
            for (ttl, batch) in due {
                let span = tracing::debug_span!("sqlock.renew", table = %target.db.table(),
                    owner = %target.owner, ttl = ?ttl, leases = batch.len());
                tick(&state, &target, ttl, batch).instrument(span).await;
            }
            let next_lapse = state.check_lapses();
            match (next_tick, next_lapse) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        };
        // A wake-up sent while the task was busy is kept (Notify stores one), so a new
        // lease, or the handle dropped, is never missed.
        match next {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = wake.notified() => {}
                }
            }
            None => wake.notified().await,
        }
    }
}

/// One group's renewal: one statement for the whole batch, bounded by the group's
/// period and by the moment the first tracked lease may lapse, so that a hung
/// connection can stall neither the other groups' renewals nor the lapse checks. A
/// renewal slower than that counts as a failed tick, never as a loss by itself: a
/// lease is lost only when it may have lapsed.
async fn tick(this: &State, target: &Target, ttl: Duration, batch: Batch) {
    if batch.is_empty() {
        return;
    }
    let json = batch_json(batch.iter().map(|(k, t)| (k.as_str(), *t)));
    let renew = Renew {
        owner: &target.owner,
        ttl_us: i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX),
        batch: &json,
    };
    let sent = Instant::now();
    // A renewal that hangs must not hold up the other groups or the lapse checks: it
    // gets a period at most, and no longer than until the first tracked lease may lapse.
    let lapse = State::earliest_lapse(&this.lock());
    let limit = lapse
        .map_or(this.period(ttl), |at| {
            this.period(ttl).min(at.saturating_duration_since(sent))
        })
        .max(Duration::from_millis(1));
    let outcome = tokio::time::timeout(limit, target.db.lease_renew(&renew, &batch)).await;
    this.ticks.fetch_add(1, Ordering::Relaxed);
    match outcome {
        Ok(Ok(renewal)) => {
            this.statements
                .fetch_add(u64::from(renewal.statements), Ordering::Relaxed);
            let survivors = match renewal.survivors {
                Some(s) => s,
                None => batch.iter().map(|(k, _)| k.clone()).collect(),
            };
            this.renewed
                .fetch_add(survivors.len() as u64, Ordering::Relaxed);
            this.meter.renewed(survivors.len() as u64);
            let revoked = revoked(target, &renew, &batch, &survivors).await;
            this.settle(ttl, sent, &batch, &survivors, &revoked);
        }
        Ok(Err(failure)) => {
            this.statements.fetch_add(1, Ordering::Relaxed);
            this.failed_ticks.fetch_add(1, Ordering::Relaxed);
            this.meter.renewal_failed();
            tracing::warn!(error = %failure.error, leases = batch.len(),
                "lease renewal failed; trying again next tick");
        }
        Err(_) => {
            this.statements.fetch_add(1, Ordering::Relaxed);
            this.failed_ticks.fetch_add(1, Ordering::Relaxed);
            this.meter.renewal_failed();
            tracing::warn!(leases = batch.len(), waited = ?limit,
                "lease renewal got no answer in time; trying again next tick");
        }
    }
}

/// Which leases of `batch` that are not among the renewal's `survivors` an operator
/// revoked: one read, sent only when the renewal lost some. Should it fail, they are
/// lost all the same, as leases no longer held.
async fn revoked(
    target: &Target,
    renew: &Renew<'_>,
    batch: &[(String, i64)],
    survivors: &[String],
) -> Vec<String> {
    let lost: Vec<(&str, i64)> = batch
        .iter()
        .filter(|(k, _)| !survivors.contains(k))
        .map(|(k, t)| (k.as_str(), *t))
        .collect();
    if lost.is_empty() {
        return Vec::new();
    }
    let json = batch_json(lost.into_iter());
    let ask = Renew {
        batch: &json,
        ..*renew
    };
    match target.db.lease_revoked(&ask).await {
        Ok(revoked) => revoked,
        Err(failure) => {
            tracing::warn!(error = %failure.error,
                "could not tell whether the leases lost were revoked");
            Vec::new()
        }
    }
}
