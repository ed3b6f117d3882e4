//! Workers contending for one key: handoff latency and what waiters send.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlock::{DbPool, Dialect, LockGuard, Locker, Strategy, TableName};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::args::BenchArgs;
use crate::baseline::native::NativeConn;
use crate::baseline::raw;
use crate::baseline::statements::{RawStatements, Values};
use crate::count;
use crate::failure::{db_failure, Failure};
use crate::figures::{Contended, Waiting};
use crate::progress::Progress;
use crate::stats::Samples;
use crate::table::{KEY_PREFIX, TTL};

/// The handoff bookkeeping of one contended run, which the peers part shares.
pub(crate) struct Handoff {
    state: Mutex<HandoffState>,
    grants: watch::Sender<u64>,
    deadline: Instant,
}

#[derive(Default)]
struct HandoffState {
    /// When the last release was called, and by whom.
    release: Option<(Instant, usize)>,
    handoff: Samples,
    grants: u64,
}

impl Handoff {
    /// The bookkeeping of a run that ends at `deadline`.
    pub(crate) fn new(deadline: Instant) -> Arc<Self> {
        let (tx, _) = watch::channel(0);
        Arc::new(Self {
            state: Mutex::new(HandoffState::default()),
            grants: tx,
            deadline,
        })
    }

    /// When the run ends.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// A receiver of the grant count, for [`wait_for_other`](Self::wait_for_other).
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.grants.subscribe()
    }

    /// The grants counted and the handoffs measured, once the run is over.
    pub(crate) fn finish(&self) -> (u64, Samples) {
        let st = std::mem::take(&mut *self.state.lock().unwrap_or_else(|e| e.into_inner()));
        (st.grants, st.handoff)
    }

    /// Records a grant to worker `me`; returns the grant count after it.
    pub(crate) fn granted(&self, me: usize) -> u64 {
        let now = Instant::now();
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if now <= self.deadline {
            st.grants += 1;
            if let Some((t, who)) = st.release.take() {
                if who != me {
                    st.handoff.push(now.saturating_duration_since(t));
                }
            }
        }
        let grants = st.grants;
        drop(st);
        self.grants.send_replace(grants);
        grants
    }

    /// Records that worker `me` is about to release.
    pub(crate) fn releasing(&self, me: usize) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.release = Some((Instant::now(), me));
    }

    /// Waits until another worker was granted the lock after grant `seen` (so that a
    /// releaser does not take the lock straight back), or the run is over.
    pub(crate) async fn wait_for_other(&self, rx: &mut watch::Receiver<u64>, seen: u64) {
        while *rx.borrow_and_update() == seen {
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, rx.changed()).await.is_err() {
                return;
            }
        }
    }
}

/// One contended worker: take, hold, release, let another take it; until the end.
async fn contend(
    h: Arc<Handoff>,
    me: usize,
    key: String,
    hold: Duration,
    mut lock: ContendedLock,
) -> Result<f64, Failure> {
    let mut waited = 0.0;
    let mut rx = h.grants.subscribe();
    loop {
        let now = Instant::now();
        if now >= h.deadline {
            break;
        }
        let started = now;
        let guard = lock.take(&key, h.deadline - now).await?;
        waited += started.elapsed().as_secs_f64();
        let Some(guard) = guard else { break };
        let seen = h.granted(me);
        // Past the end, the waiters left only pass the lock on, as fast as they can.
        if Instant::now() < h.deadline && !hold.is_zero() {
            tokio::time::sleep(hold).await;
        }
        h.releasing(me);
        lock.give(&key, guard).await?;
        h.wait_for_other(&mut rx, seen).await;
    }
    Ok(waited)
}

/// How long a for-update waiter may go on waiting after the end of a round.
///
/// The library waits for a row lock in the database in slices of a second, and MariaDB
/// only in whole seconds: a waiter whose deadline is less than a second away polls
/// instead. Waiters given the round's end as their deadline would poll through its
/// last second and inflate the statements per waiter; with this much more, every wait
/// is spent in the database. The rows granted after the end are not counted, and the
/// waiters left hand the lock on to each other within a few holds.
pub(crate) const FOR_UPDATE_GRACE: Duration = Duration::from_secs(2);

/// How a contended worker takes its lock.
enum ContendedLock {
    /// The library, with the time a wait may run past the end of the round.
    Library(Locker, Duration),
    Native(NativeConn),
}

impl ContendedLock {
    /// Takes the lock, waiting at most `left`; `None` when the time ran out.
    async fn take(
        &mut self,
        key: &str,
        left: Duration,
    ) -> Result<Option<Option<LockGuard>>, Failure> {
        match self {
            Self::Library(l, grace) => match l.acquire_timeout(key, left + *grace).await {
                Ok(g) => Ok(Some(Some(g))),
                // The time ran out: waiting, or waiting for a connection of the pool
                // the other waiters share.
                Err(sqlock::Error::Timeout { .. } | sqlock::Error::PoolExhausted) => Ok(None),
                Err(e) => Err(e.into()),
            },
            Self::Native(c) => loop {
                if c.lock(key, true).await.map_err(db_failure)? {
                    return Ok(Some(None));
                }
            },
        }
    }

    async fn give(&mut self, key: &str, guard: Option<LockGuard>) -> Result<(), Failure> {
        match (self, guard) {
            (Self::Library(..), Some(g)) => {
                g.release().await?;
                Ok(())
            }
            (Self::Native(c), _) => c.unlock(key).await.map_err(db_failure),
            (Self::Library(..), None) => Ok(()),
        }
    }
}

/// Workers contending for one key: the library polling, woken by notifications where
/// the library offers them, and the native blocking lock.
pub(crate) async fn contended(
    db: &DbPool,
    table: &TableName,
    strategies: &[Strategy],
    args: &BenchArgs,
    progress: &Progress,
) -> Result<(Vec<Contended>, bool), Failure> {
    let workers = args.waiters as usize + 1;
    let mut setups: Vec<(Waiting, Option<Strategy>)> = Vec::new();
    // Only PostgreSQL wakes waiters by notification (LISTEN/NOTIFY).
    let notify = db.dialect() == Dialect::Postgres;
    for &s in strategies {
        // For-update waiters wait in the database, not by polling.
        if s == Strategy::ForUpdate {
            setups.push((Waiting::InDatabase, Some(s)));
            continue;
        }
        setups.push((Waiting::Poll, Some(s)));
        if notify {
            setups.push((Waiting::Notify, Some(s)));
        }
        // Each worker on a pool of its own costs connections (its pool's, a wake
        // lock's, its waits'): the lease alone, which every other row is judged by.
        if s == Strategy::Lease {
            setups.push((Waiting::Apart, Some(s)));
            setups.push((Waiting::ApartPolling, Some(s)));
        }
    }
    if db.dialect() != Dialect::Sqlite {
        setups.push((Waiting::NativeBlocking, None));
    }
    let mut lockers: Vec<Option<Vec<Locker>>> = Vec::new();
    // For each setup, a waiter that looks about never, as the queue standing still
    // wants one (see `standing_still`).
    let mut quiet: Vec<Option<Locker>> = Vec::new();
    for (waiting, s) in &setups {
        let Some(s) = s else {
            lockers.push(None);
            quiet.push(None);
            continue;
        };
        let b = Locker::builder(db.clone())
            .table(table.as_str())
            .strategy(*s)
            .ttl(TTL);
        // Woken waiters keep the library's own fallback polling (100 ms to 2 s).
        let b = match waiting {
            Waiting::Notify => b.notify_waiters(true),
            _ => b,
        };
        if matches!(waiting, Waiting::Apart | Waiting::ApartPolling) {
            let waits = if *waiting == Waiting::Apart {
                sqlock::DEFAULT_SERVER_WAITS
            } else {
                0
            };
            let mut apart = Vec::with_capacity(workers);
            for w in 0..workers {
                let pool = crate::connect::apart(db, w).await?;
                apart.push(
                    Locker::builder(pool)
                        .table(table.as_str())
                        .strategy(*s)
                        .ttl(TTL)
                        .server_waits(waits)
                        .build()?,
                );
            }
            lockers.push(Some(apart));
            quiet.push(Some(b.poll_interval(QUIET, QUIET).build()?));
            continue;
        }
        let l = match waiting {
            Waiting::Notify => b.clone(),
            _ => b.clone().poll_interval(args.poll, args.poll),
        }
        .build()?;
        lockers.push(Some((0..workers).map(|_| l.new_handle()).collect()));
        quiet.push(Some(b.poll_interval(QUIET, QUIET).build()?));
    }
    let slice = args.contended_duration / args.rounds;
    let mut acc: Vec<Option<Contended>> = vec![None; setups.len()];
    // The floor under the lease's handoff: its two statements with nothing around them.
    let mut raw = RawHandoff::new(db, table, strategies)?;
    for round in 0..args.rounds {
        progress.note(&format!(
            "contended: {} waiters on one key, round {}/{}",
            args.waiters,
            round + 1,
            args.rounds
        ));
        let order: Vec<usize> = if round % 2 == 0 {
            (0..setups.len()).collect()
        } else {
            (0..setups.len()).rev().collect()
        };
        for i in order {
            let (waiting, s) = setups[i];
            let key = format!("{KEY_PREFIX}c-{}", s.map_or("native", Strategy::name));
            let mut locks = Vec::with_capacity(workers);
            for w in 0..workers {
                locks.push(match &lockers[i] {
                    Some(ls) => ContendedLock::Library(
                        ls[w].clone(),
                        if waiting == Waiting::InDatabase {
                            FOR_UPDATE_GRACE
                        } else {
                            Duration::ZERO
                        },
                    ),
                    None => {
                        ContendedLock::Native(NativeConn::acquire(db).await.map_err(db_failure)?)
                    }
                });
            }
            let before = count::snapshot();
            let h = Handoff::new(Instant::now() + slice);
            let mut set = JoinSet::new();
            for (me, lock) in locks.into_iter().enumerate() {
                set.spawn(contend(h.clone(), me, key.clone(), args.hold, lock));
            }
            let mut wait_secs = 0.0;
            while let Some(joined) = set.join_next().await {
                wait_secs +=
                    joined.map_err(|e| Failure::Other(format!("a worker failed: {e}")))??;
            }
            let stmts = count::snapshot().since(&before);
            let (grants, handoff) = h.finish();
            let m = Contended {
                waiting,
                strategy: s.map_or("advisory", Strategy::name),
                workers,
                grants,
                secs: slice.as_secs_f64(),
                handoff,
                stmts,
                wait_secs,
                still: None,
            };
            match &mut acc[i] {
                Some(a) => a.absorb(&m),
                None => acc[i] = Some(m),
            }
        }
        if let Some(r) = &mut raw {
            r.round(db, args.hold, slice).await?;
        }
    }
    let mut measured: Vec<Contended> = acc.into_iter().flatten().collect();
    measured.extend(raw.and_then(RawHandoff::finish));
    // What a queue costs while it stands still, for the waiters that poll or are woken
    // (for-update waiters wait in the server and send nothing meanwhile).
    for (i, (waiting, s)) in setups.iter().enumerate() {
        let (Some(ls), Some(quiet), Some(s)) = (&lockers[i], &quiet[i], s) else {
            continue;
        };
        if *waiting == Waiting::InDatabase {
            continue;
        }
        progress.note(&format!(
            "contended: a queue standing still, {} {}",
            s.name(),
            waiting.name()
        ));
        let key = format!("{KEY_PREFIX}still-{}-{}", s.name(), waiting.name());
        let fair = *s == Strategy::Fair;
        let still = standing_still(ls, quiet, fair, &key, args.contended_duration).await?;
        if let Some(m) = measured.get_mut(i) {
            m.still = Some(still);
        }
    }
    Ok((measured, notify))
}

/// The lease's handoff with its raw statements (`baseline::raw::handoff`), a round at a
/// time beside the contended rounds.
struct RawHandoff {
    statements: RawStatements,
    values: Values,
    next_owner: String,
    measured: Option<Contended>,
}

impl RawHandoff {
    /// `None` when the run measures no lease.
    fn new(
        db: &DbPool,
        table: &TableName,
        strategies: &[Strategy],
    ) -> Result<Option<Self>, Failure> {
        if !strategies.contains(&Strategy::Lease) {
            return Ok(None);
        }
        // Owners as the library makes them.
        let owner = || -> Result<String, Failure> {
            Ok(Locker::builder(db.clone())
                .table(table.as_str())
                .build()?
                .owner()
                .to_string())
        };
        Ok(Some(Self {
            statements: RawStatements::new(db.dialect(), table)?,
            values: Values {
                key: format!("{KEY_PREFIX}c-raw"),
                owner: owner()?,
                strategy: Strategy::Lease,
                ttl_us: TTL.as_micros() as i64,
                token: 0,
            },
            next_owner: owner()?,
            measured: None,
        }))
    }

    /// Hands the key over after each hold of `hold`, for `slice`.
    async fn round(&mut self, db: &DbPool, hold: Duration, slice: Duration) -> Result<(), Failure> {
        let before = count::snapshot();
        let until = Instant::now() + slice;
        let handoff = raw::handoff(
            db,
            &self.statements,
            &self.values,
            &self.next_owner,
            hold,
            until,
        )
        .await
        .map_err(db_failure)?;
        let m = Contended {
            waiting: Waiting::RawStatements,
            strategy: Strategy::Lease.name(),
            workers: 2,
            grants: handoff.len() as u64,
            secs: slice.as_secs_f64(),
            handoff,
            stmts: count::snapshot().since(&before),
            wait_secs: 0.0,
            still: None,
        };
        match &mut self.measured {
            Some(a) => a.absorb(&m),
            None => self.measured = Some(m),
        }
        Ok(())
    }

    fn finish(self) -> Option<Contended> {
        self.measured
    }
}

/// How long waiters settle before a window of [`standing_still`] is counted, at most:
/// a waiter that has just joined looks more often until it has waited about a second.
const SETTLE: Duration = Duration::from_secs(3);
/// How long [`standing_still`] counts statements, each time, at most.
const STILL_WINDOW: Duration = Duration::from_secs(5);

/// How seldom the quiet first waiter of [`standing_still`] looks: never, within a run.
const QUIET: Duration = Duration::from_secs(3600);

/// Statements per second of a queue standing still behind one holder of `key`: of the
/// first waiter alone (`lockers[1]`), then of each waiter behind a first waiter that
/// looks about never (`quiet`): all of `lockers` but two waiting behind it, counted
/// alone but for the holder's renewals and the quiet waiter's, about one each per
/// third of the TTL, which they share (an upper bound, within 0.03 a second each with
/// 7 behind). The first figure counts the holder's renewals too. Were the second
/// figure the whole queue's less the first waiter's from another window, it would
/// inherit the first waiter's jittered polls' noise (about 0.06 a second). Settling
/// and windows take half of `budget` each, up to [`SETTLE`] and [`STILL_WINDOW`].
async fn standing_still(
    lockers: &[Locker],
    quiet: &Locker,
    fair: bool,
    key: &str,
    budget: Duration,
) -> Result<(f64, f64), Failure> {
    let settle = (budget / 2).min(SETTLE);
    let window = (budget / 2).min(STILL_WINDOW);
    let holder = lockers[0].acquire(key).await?;
    let mut waiters = JoinSet::new();
    let wait = |set: &mut JoinSet<()>, l: &Locker| {
        let (l, k) = (l.clone(), key.to_owned());
        set.spawn(async move {
            let _ = l.acquire(&k).await;
        });
    };
    let rate = || async {
        tokio::time::sleep(settle).await;
        let before = count::snapshot();
        tokio::time::sleep(window).await;
        count::snapshot().since(&before).total() as f64 / window.as_secs_f64()
    };
    wait(&mut waiters, &lockers[1]);
    let first = rate().await;
    // Their futures dropped, fair waiters leave the queue (in tasks of their own).
    waiters.shutdown().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    wait(&mut waiters, quiet);
    // A fair queue's order is its arrival order: the quiet waiter is first once its
    // place shows, and only then do the others arrive.
    if fair {
        let deadline = Instant::now() + Duration::from_secs(30);
        while lockers[0]
            .lock_info(key)
            .await?
            .is_none_or(|i| i.waiters < 1)
        {
            if Instant::now() > deadline {
                return Err(Failure::Other("the quiet waiter never queued".into()));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    for l in &lockers[2..] {
        wait(&mut waiters, l);
    }
    let behind_all = rate().await;
    waiters.shutdown().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    holder.release().await?;
    let behind = lockers.len().saturating_sub(2).max(1) as f64;
    Ok((first, behind_all / behind))
}
