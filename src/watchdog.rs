//! The watchdog: one background task per [`Locker`](crate::Locker) handle that keeps
//! its held leases alive and tells their holders when one is lost.
//!
//! Leases are grouped by TTL; every tick of a group renews all of its leases with one
//! statement (two on MariaDB when some were lost). A lease is lost when a renewal finds
//! it no longer ours (released by force, taken after it lapsed, its row deleted), or
//! when renewals keep failing until, on the local monotonic clock counted from when the
//! last successful renewal was *sent*, the lease may have lapsed. A failed renewal
//! followed by a successful one before then is no loss.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::locker::Inner;
use crate::sql::{batch_json, Args};

/// Why a lock was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostReason {
    /// A renewal found the lease no longer ours: released by an operator, taken by
    /// another owner after it lapsed, or its row deleted.
    NotHeld,
    /// Renewals kept failing (the database unreachable, say) until the lease may have
    /// lapsed.
    Lapsed,
    /// The lease reached its cap on total hold time and expired.
    HoldCapReached,
    /// The connection that held a for-update lock's transaction ended (killed, timed
    /// out as idle in transaction, the server gone), and the lock with it.
    ConnectionLost,
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::NotHeld => "the lease is no longer held by this owner",
            Self::Lapsed => "renewals failed until the lease may have lapsed",
            Self::HoldCapReached => "the lease reached its hold cap and expired",
            Self::ConnectionLost => "the connection holding the lock's transaction ended",
        })
    }
}

/// A signal that fires when a held lock is lost; see [`LockGuard::lost`](crate::LockGuard::lost).
///
/// Clone it freely and move it into other tasks; it outlives the guard, and once fired
/// it stays fired.
#[derive(Debug, Clone)]
pub struct LostSignal {
    rx: watch::Receiver<Option<LostReason>>,
}

impl From<watch::Receiver<Option<LostReason>>> for LostSignal {
    fn from(rx: watch::Receiver<Option<LostReason>>) -> Self {
        Self { rx }
    }
}

impl LostSignal {
    /// Whether the lock was lost. Cheap: reads a shared value, sends nothing.
    pub fn is_lost(&self) -> bool {
        self.rx.borrow().is_some()
    }

    /// Why the lock was lost, if it was.
    pub fn reason(&self) -> Option<LostReason> {
        *self.rx.borrow()
    }

    /// Waits until the lock is lost and tells why. Returns at once if it already was.
    ///
    /// If the guard is released or dropped first, this waits forever: select it
    /// against the work the lock protects, as in the README's example.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    pub async fn wait(&mut self) -> LostReason {
        match self.rx.wait_for(Option::is_some).await {
            Ok(reason) => reason.unwrap_or(LostReason::NotHeld),
            // The watchdog dropped the sender without firing: the guard was released.
            Err(_) => std::future::pending().await,
        }
    }
}

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

/// One held lease, as the watchdog tracks it.
#[derive(Debug)]
struct Lease {
    /// Which registration this is: a guard unregisters only its own, never a later
    /// grant of the same key and token (a re-entry after a local lapse).
    id: u64,
    token: i64,
    holds: u32,
    ttl: Duration,
    /// When the last renewal (or the acquisition) that the database confirmed was sent:
    /// the lease is valid at least until this plus its TTL.
    confirmed: Instant,
    /// Renew only while before this instant (the hold cap, or now for no renewal).
    renew_until: Option<Instant>,
    lost: watch::Sender<Option<LostReason>>,
}

#[derive(Debug)]
struct Group {
    period: Duration,
    next: Instant,
    leases: HashMap<String, Lease>,
}

/// The `(key, token)` pairs one renewal statement covers.
type Batch = Vec<(String, i64)>;

/// The watchdog's share of a handle.
#[derive(Debug)]
pub(crate) struct Watchdog {
    groups: Mutex<BTreeMap<Duration, Group>>,
    wake: Arc<Notify>,
    started: std::sync::atomic::AtomicBool,
    interval: Option<Duration>,
    next_id: AtomicU64,
    ticks: AtomicU64,
    statements: AtomicU64,
    renewed: AtomicU64,
    failed_ticks: AtomicU64,
    lost: AtomicU64,
}

/// How a guard asks to be tracked.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Track {
    pub(crate) ttl: Duration,
    pub(crate) sent: Instant,
    /// `None`: renew for as long as it is held.
    pub(crate) renew_until: Option<Instant>,
}

impl Watchdog {
    pub(crate) fn new(interval: Option<Duration>) -> Self {
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
        }
    }

    fn period(&self, ttl: Duration) -> Duration {
        let period = match self.interval {
            Some(p) => p.min(ttl / 2),
            None => ttl / 3,
        };
        period.max(Duration::from_micros(100))
    }

    pub(crate) fn interval(&self) -> Option<Duration> {
        self.interval
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

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Duration, Group>> {
        // A panic while holding this lock leaves plain data behind; keep going.
        self.groups.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts tracking one hold of `key`, and returns its lost signal and the
    /// registration id to unregister with.
    pub(crate) fn register(
        inner: &Arc<Inner>,
        key: &str,
        token: i64,
        t: Track,
    ) -> (LostSignal, u64) {
        let this = &inner.watchdog;
        let period = this.period(t.ttl);
        let (rx, id) = {
            let mut groups = this.lock();
            // A re-entry joins the hold it shares a token with, in whatever group; the
            // database kept the later of the two expiries, and renews if either asks.
            for group in groups.values_mut() {
                if let Some(lease) = group.leases.get_mut(key) {
                    if lease.token == token {
                        lease.holds += 1;
                        let valid = (lease.confirmed + lease.ttl).max(t.sent + t.ttl);
                        lease.confirmed = valid.checked_sub(lease.ttl).unwrap_or(lease.confirmed);
                        lease.renew_until = match (lease.renew_until, t.renew_until) {
                            (Some(a), Some(b)) => Some(a.max(b)),
                            _ => None,
                        };
                        return (
                            LostSignal {
                                rx: lease.lost.subscribe(),
                            },
                            lease.id,
                        );
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
                        return (LostSignal { rx }, 0);
                    }
                    // An older grant of the key that lapsed unnoticed is lost by now.
                    if let Some(old) = group.leases.remove(key) {
                        this.fire(&old, LostReason::NotHeld);
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
                    id,
                    token,
                    holds: 1,
                    ttl: t.ttl,
                    confirmed: t.sent,
                    renew_until: t.renew_until,
                    lost: tx,
                },
            );
            (rx, id)
        };
        if !this.started.swap(true, Ordering::AcqRel) {
            let weak = Arc::downgrade(inner);
            let wake = this.wake.clone();
            tokio::spawn(run(weak, wake));
        } else {
            this.wake.notify_one();
        }
        (LostSignal { rx }, id)
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
    /// replaced the expiry, so the lease is valid until `sent + ttl`, no longer.
    pub(crate) fn extended(&self, key: &str, id: u64, sent: Instant, ttl: Duration) {
        let mut groups = self.lock();
        for group in groups.values_mut() {
            if let Some(lease) = group.leases.get_mut(key) {
                if lease.id == id {
                    if let Some(confirmed) = (sent + ttl).checked_sub(lease.ttl) {
                        lease.confirmed = confirmed;
                    }
                    return;
                }
            }
        }
        drop(groups);
        self.wake();
    }

    fn fire(&self, lease: &Lease, reason: LostReason) {
        self.lost.fetch_add(1, Ordering::Relaxed);
        lease.lost.send_replace(Some(reason));
    }

    /// The groups due at `now` with the leases to renew, and when the next is due.
    fn due(&self, now: Instant) -> (Vec<(Duration, Batch)>, Option<Instant>) {
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
    /// as of `sent`, or lost.
    fn settle(&self, ttl: Duration, sent: Instant, batch: &[(String, i64)], survivors: &[String]) {
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
                lease.confirmed = lease.confirmed.max(sent);
            } else if let Some(lease) = group.leases.remove(key) {
                self.fire(&lease, LostReason::NotHeld);
            }
        }
    }

    /// Fires every lease that was not confirmed in time and may have lapsed, and tells
    /// when the next may lapse, so that the task wakes for it whatever its ticks do.
    fn check_lapses(&self) -> Option<Instant> {
        let now = Instant::now();
        let mut groups = self.lock();
        for group in groups.values_mut() {
            let lapsed: Vec<String> = group
                .leases
                .iter()
                .filter(|(_, l)| now >= l.confirmed + l.ttl)
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
                    self.fire(&lease, reason);
                }
            }
        }
        Self::earliest_lapse(&groups)
    }

    /// When the first tracked lease may lapse, if no renewal confirms it first.
    fn earliest_lapse(groups: &BTreeMap<Duration, Group>) -> Option<Instant> {
        groups
            .values()
            .flat_map(|g| g.leases.values())
            .map(|l| l.confirmed + l.ttl)
            .min()
    }
}

/// The watchdog task of one handle. It holds the handle weakly, so that dropping the
/// handle and its guards ends it.
async fn run(weak: Weak<Inner>, wake: Arc<Notify>) {
    loop {
        let next = {
            let Some(inner) = weak.upgrade() else {
                return;
            };
            let (due, next_tick) = inner.watchdog.due(Instant::now());
            for (ttl, batch) in due {
                tick(&inner, ttl, batch).await;
            }
            let next_lapse = inner.watchdog.check_lapses();
            match (next_tick, next_lapse) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        };
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
/// period so that a hung connection cannot stall the lapse checks.
async fn tick(inner: &Arc<Inner>, ttl: Duration, batch: Batch) {
    let this = &inner.watchdog;
    if batch.is_empty() {
        return;
    }
    let args = Args {
        owner: inner.owner_text().to_owned(),
        ttl_us: i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX),
        batch: batch_json(batch.iter().map(|(k, t)| (k.as_str(), *t))),
        ..Args::default()
    };
    let sent = Instant::now();
    // A renewal that hangs must not hold up the lapse checks: it gets a period at most,
    // and no longer than until the first tracked lease may lapse.
    let lapse = Watchdog::earliest_lapse(&this.lock());
    let limit = lapse
        .map_or(this.period(ttl), |at| {
            this.period(ttl).min(at.saturating_duration_since(sent))
        })
        .max(Duration::from_millis(1));
    let outcome = tokio::time::timeout(
        limit,
        inner.db.lease_renew(&inner.stmts, &args, batch.len()),
    )
    .await;
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
            this.settle(ttl, sent, &batch, &survivors);
        }
        Ok(Err(failure)) => {
            this.statements.fetch_add(1, Ordering::Relaxed);
            this.failed_ticks.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %failure.error, leases = batch.len(),
                "lease renewal failed; trying again next tick");
        }
        Err(_) => {
            this.statements.fetch_add(1, Ordering::Relaxed);
            this.failed_ticks.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(leases = batch.len(), waited = ?limit,
                "lease renewal got no answer in time; trying again next tick");
        }
    }
}
