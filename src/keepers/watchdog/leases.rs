//! What the watchdog tracks: each held lease with the instant it is surely valid
//! until, grouped by TTL, and the counters; shared by a handle and its watchdog task.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::support::lost::{LostReason, LostSignal};
use crate::support::metrics::Meter;
use crate::support::strategy_kind::Strategy;

use super::WatchdogStats;

/// One held lease, as the watchdog tracks it.
#[derive(Debug)]
struct Lease {
    /// The strategy it is held with, for the metrics of a loss.
    strategy: Strategy,
    /// Which registration this is: a guard unregisters only its own, never a later
    /// grant of the same key and token (a re-entry after a local lapse).
    id: u64,
    token: i64,
    holds: u32,
    /// The lease is valid at least until this instant: the latest of the send times of
    /// the statements the database confirmed, each plus the TTL it asked for.
    valid_until: Instant,
    /// Renew only while before this instant (the hold cap, or now for no renewal).
    renew_until: Option<Instant>,
    /// The epoch of the handle's presence session the lease claims, if it claims one.
    presence: Option<u64>,
    lost: watch::Sender<Option<LostReason>>,
}

#[derive(Debug)]
pub(super) struct Group {
    period: Duration,
    next: Instant,
    leases: HashMap<String, Lease>,
}

/// The `(key, token)` pairs one renewal statement covers.
pub(super) type Batch = Vec<(String, i64)>;

/// The tracked leases and the counters, shared by the handle and its task; the task
/// holds it weakly between ticks, so that dropping the handle ends it.
#[derive(Debug)]
pub(crate) struct State {
    pub(super) groups: Mutex<BTreeMap<Duration, Group>>,
    pub(super) wake: Arc<Notify>,
    pub(super) started: AtomicBool,
    pub(super) interval: Option<Duration>,
    pub(super) next_id: AtomicU64,
    pub(super) ticks: AtomicU64,
    pub(super) statements: AtomicU64,
    pub(super) renewed: AtomicU64,
    pub(super) failed_ticks: AtomicU64,
    pub(super) lost: AtomicU64,
    /// The handle's metrics.
    pub(super) meter: Meter,
    /// The handle's owner, for the warning of a loss.
    owner: String,
}

/// How a guard asks to be tracked.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Track {
    pub(crate) strategy: Strategy,
    pub(crate) ttl: Duration,
    pub(crate) sent: Instant,
    /// `None`: renew for as long as it is held.
    pub(crate) renew_until: Option<Instant>,
    /// The epoch of the presence session the grant claimed, if it claimed one.
    pub(crate) presence: Option<u64>,
}

/// Ends the watchdog task with the state: the task holds it weakly between ticks and
/// wakes to find it gone. Sent from here, when the last strong reference goes, so
/// that the task cannot take one again in between and then wait for ever.
impl Drop for State {
    fn drop(&mut self) {
        self.wake.notify_one();
    }
}

impl State {
    pub(super) fn new(interval: Option<Duration>, meter: Meter, owner: String) -> Self {
        Self {
            groups: Mutex::new(BTreeMap::new()),
            wake: Arc::new(Notify::new()),
            started: false.into(),
            interval,
            next_id: AtomicU64::new(1),
            ticks: AtomicU64::new(0),
            statements: AtomicU64::new(0),
            renewed: AtomicU64::new(0),
            failed_ticks: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            meter,
            owner,
        }
    }

    pub(super) fn period(&self, ttl: Duration) -> Duration {
        let period = match self.interval {
            Some(p) => p.min(ttl / 2),
            None => ttl / 3,
        };
        period.max(Duration::from_micros(100))
    }

    /// Wakes the task, to look again (at a new lease, or at a handle that is gone).
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    pub(crate) fn stats(&self) -> WatchdogStats {
        WatchdogStats {
            ticks: self.ticks.load(Ordering::Relaxed),
            statements: self.statements.load(Ordering::Relaxed),
            renewed: self.renewed.load(Ordering::Relaxed),
            failed_ticks: self.failed_ticks.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Duration, Group>> {
        // A panic while holding this lock leaves plain data behind; keep going.
        self.groups.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one hold of `key`; see [`Watchdog::register`].
    pub(super) fn track(&self, key: &str, token: i64, t: Track) -> (LostSignal, u64) {
        let this = self;
        let period = this.period(t.ttl);
        let (rx, id) = {
            let mut groups = this.lock();
            // A re-entry joins the hold it shares a token with, in whatever group; the
            // database kept the later of the two expiries, and renews if either asks.
            for group in groups.values_mut() {
                if let Some(lease) = group.leases.get_mut(key) {
                    if lease.token == token {
                        lease.holds += 1;
                        lease.valid_until = lease.valid_until.max(t.sent + t.ttl);
                        // The re-entry recorded the session it was granted under.
                        lease.presence = t.presence.or(lease.presence);
                        lease.renew_until = match (lease.renew_until, t.renew_until) {
                            (Some(a), Some(b)) => Some(a.max(b)),
                            _ => None,
                        };
                        return (LostSignal::from(lease.lost.subscribe()), lease.id);
                    }
                }
            }
            let (tx, rx) = watch::channel(None);
            for group in groups.values_mut() {
                if let Some(old) = group.leases.get(key) {
                    if old.token > token {
                        // This grant is the stale one (registered after a newer grant
                        // of the key to this handle): it is lost already.
                        tx.send_replace(Some(LostReason::NotHeld));
                        return (LostSignal::from(rx), 0);
                    }
                    // An older grant of the key that lapsed unnoticed is lost by now.
                    if let Some(old) = group.leases.remove(key) {
                        this.fire(key, &old, LostReason::NotHeld);
                    }
                }
            }
            let id = this.next_id.fetch_add(1, Ordering::Relaxed);
            let group = groups.entry(t.ttl).or_insert_with(|| Group {
                period,
                next: Instant::now() + period,
                leases: HashMap::new(),
            });
            group.leases.insert(
                key.to_owned(),
                Lease {
                    strategy: t.strategy,
                    id,
                    token,
                    holds: 1,
                    valid_until: t.sent + t.ttl,
                    renew_until: t.renew_until,
                    presence: t.presence,
                    lost: tx,
                },
            );
            (rx, id)
        };
        (LostSignal::from(rx), id)
    }

    /// Stops tracking one hold of registration `id`: the last hold's lease is renewed
    /// no more, from this call on.
    pub(crate) fn unregister(&self, key: &str, id: u64) {
        let mut groups = self.lock();
        for group in groups.values_mut() {
            if let Some(lease) = group.leases.get_mut(key) {
                if lease.id == id {
                    lease.holds = lease.holds.saturating_sub(1);
                    if lease.holds == 0 {
                        group.leases.remove(key);
                    }
                    return;
                }
            }
        }
    }

    /// Records an explicit extension, sent at `sent`, to `ttl` from then: the database
    /// keeps the later of that and the expiry it had, so the lease is valid until at
    /// least `sent + ttl`.
    pub(crate) fn extended(&self, key: &str, id: u64, sent: Instant, ttl: Duration) {
        let mut groups = self.lock();
        for group in groups.values_mut() {
            if let Some(lease) = group.leases.get_mut(key) {
                if lease.id == id {
                    lease.valid_until = lease.valid_until.max(sent + ttl);
                    return;
                }
            }
        }
        drop(groups);
        self.wake();
    }

    /// Tells the holder of `key` that its lease is lost, and why.
    fn fire(&self, key: &str, lease: &Lease, reason: LostReason) {
        self.lost.fetch_add(1, Ordering::Relaxed);
        self.meter.lost(lease.strategy, key, reason);
        tracing::warn!(key, strategy = %lease.strategy, owner = %self.owner,
            token = lease.token, %reason, "lock lost");
        lease.lost.send_replace(Some(reason));
    }

    /// The groups due at `now` with the leases to renew, and when the next is due.
    pub(super) fn due(&self, now: Instant) -> (Vec<(Duration, Batch)>, Option<Instant>) {
        let mut groups = self.lock();
        groups.retain(|_, g| !g.leases.is_empty());
        let mut due = Vec::new();
        for (ttl, group) in groups.iter_mut() {
            if group.next <= now {
                let batch: Vec<_> = group
                    .leases
                    .iter()
                    .filter(|(_, l)| l.renew_until.is_none_or(|u| now < u))
                    .map(|(k, l)| (k.clone(), l.token))
                    .collect();
                due.push((*ttl, batch));
                group.next = now + group.period;
            }
        }
        let next = groups.values().map(|g| g.next).min();
        (due, next)
    }

    /// Applies a renewal's survivors to its group: each lease of the batch is confirmed
    /// as of `sent`, or lost: revoked by an operator when among `revoked`.
    pub(super) fn settle(
        &self,
        ttl: Duration,
        sent: Instant,
        batch: &[(String, i64)],
        survivors: &[String],
        revoked: &[String],
    ) {
        let mut groups = self.lock();
        let Some(group) = groups.get_mut(&ttl) else {
            return;
        };
        for (key, token) in batch {
            let Some(lease) = group.leases.get_mut(key) else {
                continue; // released meanwhile
            };
            if lease.token != *token {
                continue; // granted again meanwhile; this batch spoke of the old grant
            }
            if survivors.iter().any(|s| s == key) {
                lease.valid_until = lease.valid_until.max(sent + ttl);
            } else if let Some(lease) = group.leases.remove(key) {
                let reason = if revoked.contains(key) {
                    LostReason::Revoked
                } else {
                    LostReason::NotHeld
                };
                self.fire(key, &lease, reason);
            }
        }
    }

    /// [`check_now`](Self::check_now) for every lease tracked: after the release
    /// listener (re)connected, a revocation may have gone unheard.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn check_all(&self) {
        let now = Instant::now();
        let mut groups = self.lock();
        for group in groups.values_mut() {
            group.next = group.next.min(now);
        }
        let any = !groups.is_empty();
        drop(groups);
        if any {
            self.wake();
        }
    }

    /// Has the group that renews `key` renewed at once, ahead of its tick, if a lease
    /// of `key` is tracked (one of several for the key is enough): an operator may
    /// have revoked it, and the renewal that fails tells its holder.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn check_now(&self, key: &str) {
        let now = Instant::now();
        let mut found = false;
        for group in self.lock().values_mut() {
            if group.leases.contains_key(key) {
                group.next = group.next.min(now);
                found = true;
            }
        }
        if found {
            self.wake();
        }
    }

    /// Fires every lease that was not confirmed in time and may have lapsed, and tells
    /// when the next may lapse, so that the task wakes for it whatever its ticks do.
    pub(super) fn check_lapses(&self) -> Option<Instant> {
        let now = Instant::now();
        let mut groups = self.lock();
        for group in groups.values_mut() {
            let lapsed: Vec<String> = group
                .leases
                .iter()
                .filter(|(_, l)| now >= l.valid_until)
                .map(|(k, _)| k.clone())
                .collect();
            for key in lapsed {
                if let Some(lease) = group.leases.remove(&key) {
                    let capped = lease.renew_until.is_some_and(|u| now >= u);
                    let reason = if capped {
                        LostReason::HoldCapReached
                    } else {
                        LostReason::Lapsed
                    };
                    self.fire(&key, &lease, reason);
                }
            }
        }
        Self::earliest_lapse(&groups)
    }

    /// The leases that recorded the handle's presence marker under an epoch before
    /// `before` (`u64::MAX`: all of them), for the presence's checker.
    pub(crate) fn presence_claims(&self, before: u64) -> Batch {
        let groups = self.lock();
        groups
            .values()
            .flat_map(|g| g.leases.iter())
            .filter(|(_, l)| l.presence.is_some_and(|e| e < before))
            .map(|(k, l)| (k.clone(), l.token))
            .collect()
    }

    /// Applies the presence checker's answer for `batch`, asked after the marker was
    /// held again under `epoch`: each lease among `survivors` is the handle's under a
    /// held marker (now of that epoch), any other was taken while the marker was free.
    pub(crate) fn presence_checked(
        &self,
        epoch: u64,
        batch: &[(String, i64)],
        survivors: &[String],
    ) {
        let mut groups = self.lock();
        for group in groups.values_mut() {
            for (key, token) in batch {
                let Some(lease) = group.leases.get_mut(key) else {
                    continue; // released meanwhile, or in another group
                };
                if lease.token != *token {
                    continue; // granted again meanwhile; the check spoke of the old grant
                }
                if survivors.iter().any(|s| s == key) {
                    lease.presence = lease.presence.map(|e| e.max(epoch));
                } else if let Some(lease) = group.leases.remove(key) {
                    self.fire(key, &lease, LostReason::PresenceLost);
                }
            }
        }
    }

    /// When the first tracked lease may lapse, if no renewal confirms it first.
    pub(super) fn earliest_lapse(groups: &BTreeMap<Duration, Group>) -> Option<Instant> {
        groups
            .values()
            .flat_map(|g| g.leases.values())
            .map(|l| l.valid_until)
            .min()
    }
}
