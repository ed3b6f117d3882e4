//! The fair strategy (`Strategy::Fair`): waiters are granted the lock in order of
//! arrival, also when they are processes of their own; a waiter killed in the middle of
//! the queue is skipped once its place lapses; a waiter that stops waiting passes its
//! turn on; `try_acquire` never jumps the queue; under contention no two holders
//! overlap and tokens rise; a fair waiter and a holder of another strategy exclude
//! each other on a brand-new key. On every backend: a SQLite file, PostgreSQL (with and
//! without notifications) and MariaDB.
//!
//! The waiters in processes of their own are this very test binary, started with
//! `SQLOCK_FAIR_WAITER` set, running `waiter_process` alone: it waits for the key,
//! says so when it has it, releases it and ends.

mod common;

use common::fair::{self, lockers, queued, take_turn, until};

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use sqlock::{Dialect, Locker, Strategy};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// What a waiter process is told: dialect, table, key, TTL in milliseconds, and
/// whether releases notify (PostgreSQL).
const WAITER: &str = "SQLOCK_FAIR_WAITER";

/// How long any wait of these tests may take before it counts as a failure.
const DEADLINE: Duration = Duration::from_secs(60);

fn dialect_name(d: Dialect) -> &'static str {
    match d {
        Dialect::Postgres => "postgres",
        Dialect::MySql => "mysql",
        _ => "sqlite",
    }
}

/// The waiter: runs only in a process started by [`spawn_waiter`].
#[tokio::test]
async fn waiter_process() -> anyhow::Result<()> {
    let Ok(spec) = std::env::var(WAITER) else {
        return Ok(());
    };
    let parts: Vec<&str> = spec.split('|').collect();
    let [dialect, table, key, ttl_ms, notify] = parts[..] else {
        anyhow::bail!("bad {WAITER}: {spec}");
    };
    let dialect = match dialect {
        "postgres" => Dialect::Postgres,
        "mysql" => Dialect::MySql,
        _ => Dialect::Sqlite,
    };
    let b = common::backends_of(table, &[dialect])
        .await
        .pop()
        .context("the waiter's backend")?;
    let locker = b
        .builder()
        .await?
        .strategy(Strategy::Fair)
        .notify_waiters(notify == "1")
        .ttl(Duration::from_millis(ttl_ms.parse()?))
        .build()?;
    println!("OWNER {}", locker.owner());
    let guard = locker.acquire(key).await?;
    println!("HELD {}", guard.fencing_token());
    assert!(guard.release().await?, "the lock was lost while held");
    println!("RELEASED");
    Ok(())
}

/// A waiter process of `key`, once the queue shows it.
async fn spawn_waiter(
    b: &common::Backend,
    probe: &Locker,
    key: &str,
    ttl: Duration,
    notify: bool,
) -> anyhow::Result<Child> {
    let before = queued(b, probe, key).await?;
    let spec = format!(
        "{}|{}|{key}|{}|{}",
        dialect_name(b.dialect),
        b.table,
        ttl.as_millis(),
        u8::from(notify)
    );
    let child = Command::new(std::env::current_exe()?)
        .args([
            "waiter_process",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(WAITER, spec)
        .env("SQLOCK_TEST_PARENT_PID", std::process::id().to_string())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    // Arrived: its place is in the queue before the next waiter starts.
    until(|| async { Ok(queued(b, probe, key).await? > before) }).await?;
    Ok(child)
}

/// The token a waiter process was granted, once it has released and ended; `None`
/// when it ended without holding.
async fn token_of(child: &mut Child) -> anyhow::Result<Option<i64>> {
    let stdout = child.stdout.take().context("the waiter's stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let mut token = None;
    let mut released = false;
    tokio::time::timeout(DEADLINE, async {
        while let Some(line) = lines.next_line().await? {
            // The harness may have begun the line with the test's name.
            if let Some(at) = line.find("HELD ") {
                token = Some(line[at + 5..].trim().parse::<i64>()?);
            }
            if line.contains("RELEASED") {
                released = true;
            }
        }
        Ok::<_, anyhow::Error>(())
    })
    .await
    .context("the waiter took too long")??;
    let status = tokio::time::timeout(DEADLINE, child.wait()).await??;
    anyhow::ensure!(status.success(), "the waiter failed: {status}");
    anyhow::ensure!(released || token.is_none(), "held but never released");
    Ok(token)
}

#[tokio::test]
async fn waiters_in_processes_are_served_in_arrival_order() -> anyhow::Result<()> {
    for b in common::backends("fair_order").await {
        b.fresh_table().await?;
        for (notify, holder) in lockers(&b, Duration::from_secs(10)).await? {
            let key = format!("order-{notify}");
            let first = holder.acquire(&key).await?;
            let mut waiters = Vec::new();
            for _ in 0..4 {
                waiters
                    .push(spawn_waiter(&b, &holder, &key, Duration::from_secs(10), notify).await?);
            }
            // Released: handed to the first waiter, then from each to the next.
            let mut last = first.fencing_token();
            assert!(first.release().await?);
            for (i, w) in waiters.iter_mut().enumerate() {
                let token = token_of(w).await?.context("a waiter never held")?;
                assert!(
                    token > last,
                    "{}/{notify}: waiter {i} got token {token} after {last}: out of order",
                    b.dialect
                );
                last = token;
            }
            assert_eq!(queued(&b, &holder, &key).await?, 0, "{}", b.dialect);
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_killed_waiter_is_skipped_after_its_ttl() -> anyhow::Result<()> {
    common::on_each(common::backends("fair_killed").await, |b| async move {
        b.fresh_table().await?;
        // The waiter to be killed has a short TTL, so that its place lapses soon; the
        // live ones a long one, so that a renewal a loaded machine delays never lets
        // theirs lapse and send them to the back of the queue.
        let (short, long) = (Duration::from_secs(2), Duration::from_secs(60));
        for (notify, holder) in lockers(&b, long).await? {
            let key = format!("killed-{notify}");
            let first = holder.acquire(&key).await?;
            let mut before = spawn_waiter(&b, &holder, &key, long, notify).await?;
            let mut dead = spawn_waiter(&b, &holder, &key, short, notify).await?;
            let mut after = spawn_waiter(&b, &holder, &key, long, notify).await?;
            // SIGKILL the waiter in the middle, and make sure the kill took.
            let pid = dead.id().context("the waiter has exited")?;
            kill(Pid::from_raw(i32::try_from(pid)?), Signal::SIGKILL)?;
            let status = tokio::time::timeout(DEADLINE, dead.wait()).await??;
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(
                status.signal(),
                Some(9),
                "{}: the kill did not take",
                b.dialect
            );
            assert_eq!(queued(&b, &holder, &key).await?, 3, "{}", b.dialect);
            assert!(first.release().await?);
            let t1 = token_of(&mut before)
                .await?
                .context("the first waiter never held")?;
            let t3 = token_of(&mut after)
                .await?
                .context("the last waiter never held")?;
            assert!(t3 > t1, "{}/{notify}: {t3} after {t1}", b.dialect);
            // The dead waiter's place stays until swept: it lapsed, and nobody is queued.
            let info = holder.lock_info(&key).await?;
            assert!(info.is_none(), "{}: {info:?}", b.dialect);
            holder.sweep(sqlock::SweepOptions::new()).await?;
            assert_eq!(queued(&b, &holder, &key).await?, 0, "{}", b.dialect);
        }
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_waiter_that_stops_waiting_passes_its_turn_on() -> anyhow::Result<()> {
    for b in common::backends("fair_cancel").await {
        b.fresh_table().await?;
        for (notify, holder) in lockers(&b, Duration::from_secs(10)).await? {
            let key = format!("cancel-{notify}");
            let guard = holder.acquire(&key).await?;
            let (quitter, next) = (holder.new_handle(), holder.new_handle());
            let k = key.clone();
            let quitting = tokio::spawn(async move { quitter.acquire(&k).await.map(drop) });
            until(|| async { Ok(queued(&b, &holder, &key).await? == 1) }).await?;
            let k = key.clone();
            let waiting = take_turn(next, k);
            until(|| async { Ok(queued(&b, &holder, &key).await? == 2) }).await?;
            // The first waiter's future is dropped: it leaves the queue.
            quitting.abort();
            assert!(quitting.await.unwrap_err().is_cancelled());
            until(|| async { Ok(queued(&b, &holder, &key).await? == 1) }).await?;
            let held = guard.fencing_token();
            assert!(guard.release().await?);
            let token = tokio::time::timeout(DEADLINE, waiting).await???;
            assert!(token > held, "{}", b.dialect);

            // A deadline met in the queue leaves it too.
            let guard = holder.acquire(&key).await?;
            let late = holder.new_handle();
            let waited = late.acquire_timeout(&key, Duration::from_millis(300)).await;
            assert!(
                matches!(waited, Err(sqlock::Error::Timeout { .. })),
                "{waited:?}"
            );
            until(|| async { Ok(queued(&b, &holder, &key).await? == 0) }).await?;
            assert!(guard.release().await?);
        }
    }
    Ok(())
}

/// A waiter's place outlives its TTL however seldom the handle polls: the first waiter
/// and one behind it, on a handle that polls every 30 s with a TTL of 3 s, keep their
/// places (renewed, on the database clock, past their first expiry), and the lock
/// goes to them in their order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn places_outlive_their_ttl_whatever_the_poll_interval() -> anyhow::Result<()> {
    common::on_each(common::backends("fair_slow_polls").await, |b| async move {
        b.fresh_table().await?;
        let holder = fair::locker(&b, Duration::from_secs(60)).await?;
        let slow = b
            .builder()
            .await?
            .strategy(Strategy::Fair)
            .ttl(Duration::from_secs(3))
            .poll_interval(Duration::from_secs(30), Duration::from_secs(30))
            .build()?;
        let key = "slow";
        let guard = holder.acquire(key).await?;
        let (first, second) = (slow.new_handle(), slow.new_handle());
        let first_owner = first.owner().to_string();
        let waiting_first = take_turn(first, key);
        until(|| async { Ok(queued(&b, &holder, key).await? == 1) }).await?;
        let waiting_second = take_turn(second, key);
        until(|| async { Ok(queued(&b, &holder, key).await? == 2) }).await?;
        // The places' first expiry, then the database clock past it, both places live.
        let places = places_sql(&b);
        let first_expiry = b.scalar(holder.pool(), &places.latest_expiry).await?;
        until(|| async { Ok(b.scalar(holder.pool(), &places.now).await? > first_expiry) }).await?;
        assert_eq!(
            b.scalar(holder.pool(), &places.live).await?,
            2,
            "{}: a place lapsed while its waiter waited",
            b.dialect
        );
        let info = holder.lock_info(key).await?.context("held")?;
        assert_eq!(info.waiters, 2, "{}", b.dialect);
        let held = guard.fencing_token();
        assert!(guard.release().await?);
        assert_eq!(
            holder.lock_info(key).await?.context("handed on")?.owner,
            first_owner,
            "{}: not handed to the first waiter",
            b.dialect
        );
        let t1 = tokio::time::timeout(common::fair::PATIENCE, waiting_first).await???;
        let t2 = tokio::time::timeout(common::fair::PATIENCE, waiting_second).await???;
        assert!(held < t1 && t1 < t2, "{}: {held}, {t1}, {t2}", b.dialect);
        Ok(())
    })
    .await
}

/// With a short TTL every look of a waiter falls due to renew its place: a waiter two
/// places or more from the first still reads its standing, and learns of its turn.
/// Three waiters with a TTL of 3 s queue behind a holder, then get the lock in their
/// order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_far_back_with_a_short_ttl_learn_of_their_turn() -> anyhow::Result<()> {
    common::on_each(common::backends("fair_short_ttl").await, |b| async move {
        b.fresh_table().await?;
        let holder = fair::locker(&b, Duration::from_secs(60)).await?;
        let short = fair::locker(&b, Duration::from_secs(3)).await?;
        let key = "short";
        let guard = holder.acquire(key).await?;
        let mut waiting = Vec::new();
        for n in 1..=3 {
            let w = short.new_handle();
            waiting.push(take_turn(w, key));
            until(|| async { Ok(queued(&b, &holder, key).await? == n) }).await?;
        }
        // Long enough for several looks of each, every one of them due.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let mut last = guard.fencing_token();
        assert!(guard.release().await?);
        for (i, w) in waiting.into_iter().enumerate() {
            let token = tokio::time::timeout(common::fair::PATIENCE, w)
                .await
                .with_context(|| {
                    format!("{}: waiter {i} never learned of its turn", b.dialect)
                })???;
            assert!(
                token > last,
                "{}: waiter {i}: {token} after {last}",
                b.dialect
            );
            last = token;
        }
        Ok(())
    })
    .await
}

/// Queries of the queue of `b`'s table, with its times in microseconds since the epoch
/// on the database clock: the latest expiry of a place, the database's now, and how
/// many places are live.
struct PlacesSql {
    latest_expiry: String,
    now: String,
    live: String,
}

fn places_sql(b: &common::Backend) -> PlacesSql {
    let (q, epoch_us, now) = match b.dialect {
        Dialect::Postgres => (
            format!("\"{}_queue\"", b.table),
            "CAST(extract(epoch FROM expires_at) * 1000000 AS BIGINT)",
            "CAST(extract(epoch FROM clock_timestamp()) * 1000000 AS BIGINT)",
        ),
        Dialect::MySql => (
            format!("`{}_queue`", b.table),
            "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', expires_at)",
            "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))",
        ),
        _ => (
            format!("\"{}_queue\"", b.table),
            "expires_at",
            "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)",
        ),
    };
    PlacesSql {
        latest_expiry: format!("SELECT MAX({epoch_us}) FROM {q}"),
        now: format!("SELECT {now}"),
        live: format!("SELECT COUNT(*) FROM {q} WHERE {epoch_us} > ({now})"),
    }
}

#[tokio::test]
async fn try_acquire_never_jumps_the_queue() -> anyhow::Result<()> {
    for b in common::backends("fair_try").await {
        b.fresh_table().await?;
        let holder = fair::locker(&b, Duration::from_secs(10)).await?;
        let key = "try";
        // Free and nobody queued: taken at once, and re-entered by its holder.
        let crashing = holder.new_handle();
        let guard = crashing.try_acquire(key).await?.context("a free key")?;
        let again = crashing.try_acquire(key).await?.context("a re-entry")?;
        assert_eq!(again.hold_count(), 2);
        assert!(again.release().await?);
        let waiter = holder.new_handle();
        let waiting = tokio::spawn(async move { waiter.acquire(key).await });
        until(|| async { Ok(queued(&b, &holder, key).await? == 1) }).await?;
        let other = holder.new_handle();
        assert!(other.try_acquire(key).await?.is_none(), "{}", b.dialect);
        // Its lease lapses as a crashed holder's would (never released, never renewed
        // again): with a waiter queued, the free lock is the waiter's, never a
        // newcomer's.
        std::mem::forget(guard);
        drop(crashing);
        b.expire(holder.pool(), key).await?;
        for _ in 0..20 {
            if let Some(g) = other.try_acquire(key).await? {
                let queued_now = queued(&b, &holder, key).await?;
                panic!(
                    "{}: jumped the queue ({queued_now} queued): {g:?}",
                    b.dialect
                );
            }
        }
        let g = tokio::time::timeout(DEADLINE, waiting).await???;
        assert!(g.release().await?);
        assert_eq!(queued(&b, &holder, key).await?, 0);
        assert!(other.try_acquire(key).await?.is_some());
    }
    Ok(())
}

#[tokio::test]
async fn no_overlap_and_rising_tokens_under_contention() -> anyhow::Result<()> {
    for b in common::backends("fair_contention").await {
        b.fresh_table().await?;
        for (notify, base) in lockers(&b, Duration::from_secs(10)).await? {
            let key = format!("contended-{notify}");
            let held = Arc::new(AtomicBool::new(false));
            let tokens = Arc::new(Mutex::new(Vec::new()));
            let mut tasks = Vec::new();
            for _ in 0..4 {
                let (locker, key) = (base.new_handle(), key.clone());
                let (held, tokens) = (held.clone(), tokens.clone());
                tasks.push(tokio::spawn(async move {
                    for _ in 0..5 {
                        let guard = locker.acquire(&key).await?;
                        assert!(!held.swap(true, Ordering::SeqCst), "two holders at once");
                        tokens.lock().unwrap().push(guard.fencing_token());
                        tokio::task::yield_now().await;
                        held.store(false, Ordering::SeqCst);
                        assert!(guard.release().await?);
                    }
                    Ok::<_, sqlock::Error>(())
                }));
            }
            for t in tasks {
                tokio::time::timeout(DEADLINE, t).await???;
            }
            let tokens = tokens.lock().unwrap().clone();
            assert_eq!(tokens.len(), 20);
            assert!(
                tokens.windows(2).all(|w| w[0] < w[1]),
                "{}: tokens out of grant order: {tokens:?}",
                b.dialect
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn one_key_one_strategy_on_a_brand_new_key() -> anyhow::Result<()> {
    for b in common::backends("fair_cross").await {
        b.fresh_table().await?;
        let fair = b.builder().await?.strategy(Strategy::Fair).build()?;
        let mut others = vec![Strategy::Lease, Strategy::Insert];
        if b.dialect != Dialect::Sqlite {
            others.push(Strategy::ForUpdate);
        }
        for other in others {
            let rival = fair.new_handle();
            // Rounds that one side won: a race both sides always lost would show
            // nothing.
            let mut won = 0;
            for round in 0..10 {
                let key = format!("new-{other}-{round}");
                // Both at once on a key that has no row yet.
                let (a, o) = tokio::join!(
                    fair.try_acquire(&key),
                    rival.lock(&key).strategy(other).try_acquire()
                );
                let (a, o) = (a?, o?);
                assert!(
                    a.is_none() || o.is_none(),
                    "{}: fair and {other} both hold {key}",
                    b.dialect
                );
                won += usize::from(a.is_some() || o.is_some());
                // The loser sees it held, whichever strategy won.
                if let Some(g) = a {
                    assert!(rival
                        .lock(&key)
                        .strategy(other)
                        .try_acquire()
                        .await?
                        .is_none());
                    assert!(g.release().await?);
                }
                if let Some(g) = o {
                    assert!(fair.try_acquire(&key).await?.is_none());
                    g.release().await?;
                }
                // And a fair waiter waits for the other strategy's holder to finish.
                let key = format!("wait-{other}-{round}");
                let g = rival.lock(&key).strategy(other).acquire().await?;
                let waited = fair.acquire_timeout(&key, Duration::from_millis(50)).await;
                assert!(
                    matches!(waited, Err(sqlock::Error::Timeout { .. })),
                    "{waited:?}"
                );
                g.release().await?;
                let f = fair.acquire_timeout(&key, DEADLINE).await?;
                assert!(rival
                    .lock(&key)
                    .strategy(other)
                    .try_acquire()
                    .await?
                    .is_none());
                assert!(f.release().await?);
            }
            assert!(
                won > 0,
                "{}: fair against {other}: nobody won any race",
                b.dialect
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn list_shows_waiters_and_force_release_hands_on() -> anyhow::Result<()> {
    for b in common::backends("fair_admin").await {
        b.fresh_table().await?;
        let holder = b.builder().await?.strategy(Strategy::Fair).build()?;
        let key = "admin";
        let guard = holder.acquire(key).await?;
        let waiter = holder.new_handle();
        let waiting = tokio::spawn(async move { waiter.acquire(key).await });
        until(|| async { Ok(queued(&b, &holder, key).await? == 1) }).await?;
        let listed = holder.list().await?;
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].strategy, "fair");
        assert_eq!(listed[0].waiters, 1, "{}", b.dialect);
        assert!(holder.force_release_now(key).await?);
        let g = tokio::time::timeout(DEADLINE, waiting).await???;
        assert!(g.fencing_token() > guard.fencing_token());
        assert!(!guard.release().await?);
        assert_eq!(holder.lock_info(key).await?.context("held")?.waiters, 0);
        assert!(g.release().await?);
    }
    Ok(())
}

/// An operator's release of a fair lock with a waiter queued hands it to that waiter in
/// the release's own transaction: a lease newcomer trying the key as fast as it can
/// never gets it between the release and the handoff. The waiter polls once a minute,
/// so that the grant it holds right after the release can only be the release's doing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_leaves_no_window_for_a_newcomer() -> anyhow::Result<()> {
    for b in common::backends("fair_force_window").await {
        b.fresh_table().await?;
        let base = b
            .builder()
            .await?
            .strategy(Strategy::Fair)
            .ttl(Duration::from_secs(600))
            .poll_interval(Duration::from_secs(60), Duration::from_secs(60))
            .build()?;
        let mut tried = 0u64;
        for round in 0..10 {
            let key = format!("window-{round}");
            let guard = base.acquire(&key).await?;
            let waiter = base.new_handle();
            let waiter_owner = waiter.owner().to_string();
            let k = key.clone();
            let waiting = tokio::spawn(async move { waiter.acquire(&k).await });
            until(|| async { Ok(queued(&b, &base, &key).await? == 1) }).await?;
            // A lease newcomer tries the key without pause until the release is done.
            let (stop, stopped) = tokio::sync::watch::channel(false);
            let newcomer = base.new_handle();
            let k = key.clone();
            let rival = tokio::spawn(async move {
                let mut tries = 0u64;
                while !*stopped.borrow() {
                    tries += 1;
                    if let Some(g) = newcomer
                        .lock(&k)
                        .strategy(Strategy::Lease)
                        .try_acquire()
                        .await?
                    {
                        anyhow::bail!("a lease newcomer took {k} (token {})", g.fencing_token());
                    }
                }
                Ok(tries)
            });
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(base.force_release_now(&key).await?);
            let info = base.lock_info(&key).await?.context("handed on")?;
            stop.send_replace(true);
            tried += rival.await??;
            assert_eq!(info.owner, waiter_owner, "{}: not handed on", b.dialect);
            assert!(info.fencing_token > guard.fencing_token());
            assert!(!guard.release().await?);
            waiting.abort();
            let _ = waiting.await;
            until(|| async { Ok(queued(&b, &base, &key).await? == 0) }).await?;
        }
        assert!(tried > 0, "{}: the newcomer never tried", b.dialect);
    }
    Ok(())
}

#[tokio::test]
async fn a_grant_handed_to_a_waiter_that_left_goes_on() -> anyhow::Result<()> {
    for b in common::backends("fair_departed").await {
        b.fresh_table().await?;
        // Long places and slow polls: the grant handed to the first waiter stays
        // untaken until its waiter is gone, and only a handoff, not a lapse, can pass
        // it on within the test's deadline.
        let ttl = Duration::from_secs(120);
        let holder = b
            .builder()
            .await?
            .strategy(Strategy::Fair)
            .ttl(ttl)
            .poll_interval(Duration::from_secs(30), Duration::from_secs(30))
            .build()?;
        // The waiter behind looks often, so that it takes up the grant passed on to it
        // soon; it is never first before the first waiter leaves, so its looks cannot
        // take the lock.
        let next = b
            .builder()
            .await?
            .strategy(Strategy::Fair)
            .ttl(ttl)
            .poll_interval(Duration::from_millis(50), Duration::from_millis(200))
            .build()?;
        let key = "departed";
        let guard = holder.acquire(key).await?;
        // On a pool apart: the release's wake-up within this process does not reach
        // it, so it takes the grant up only at its next poll, 30 s on.
        let leaving = b
            .builder_apart()
            .await?
            .strategy(Strategy::Fair)
            .ttl(ttl)
            .poll_interval(Duration::from_secs(30), Duration::from_secs(30))
            .build()?;
        let leaving_owner = leaving.owner().to_string();
        let quitting = tokio::spawn(async move { leaving.acquire(key).await.map(drop) });
        until(|| async { Ok(queued(&b, &holder, key).await? == 1) }).await?;
        let waiting = take_turn(next, key);
        until(|| async { Ok(queued(&b, &holder, key).await? == 2) }).await?;
        // Handed to the first waiter, which has not taken it up yet.
        assert!(guard.release().await?);
        let info = holder.lock_info(key).await?.context("handed on")?;
        assert_eq!(info.owner, leaving_owner, "{}", b.dialect);
        assert_eq!(
            queued(&b, &holder, key).await?,
            2,
            "{}: taken up already",
            b.dialect
        );
        // It stops waiting: the grant goes on to the next waiter, long before its TTL.
        quitting.abort();
        let token = tokio::time::timeout(DEADLINE, waiting).await???;
        assert!(token > info.fencing_token, "{}", b.dialect);
        assert_eq!(queued(&b, &holder, key).await?, 0, "{}", b.dialect);
    }
    Ok(())
}

#[tokio::test]
async fn postgres_wakes_the_waiter_a_handoff_names() -> anyhow::Result<()> {
    for b in common::backends_of("fair_named", &[Dialect::Postgres]).await {
        b.fresh_table().await?;
        // Polls far apart: within the deadline only the notification can wake the
        // first waiter to take up its grant.
        let locker = b
            .builder()
            .await?
            .strategy(Strategy::Fair)
            .notify_waiters(true)
            .ttl(Duration::from_secs(600))
            .poll_interval(Duration::from_secs(300), Duration::from_secs(300))
            .build()?;
        let key = "named";
        let guard = locker.acquire(key).await?;
        let waiter = locker.new_handle();
        let waiting = tokio::spawn(async move { waiter.acquire(key).await });
        until(|| async { Ok(queued(&b, &locker, key).await? == 1) }).await?;
        let held = guard.fencing_token();
        assert!(guard.release().await?);
        let g = tokio::time::timeout(DEADLINE, waiting)
            .await
            .context("the waiter the handoff named was not woken")???;
        assert!(g.fencing_token() > held);
        // Taken as the notification described it: the guard's token and expiry are
        // the row's, and the place it left behind goes.
        let info = locker.lock_info(key).await?.context("held")?;
        assert_eq!(info.fencing_token, g.fencing_token());
        assert_eq!(info.owner, g.owner().to_string());
        assert_eq!(info.expires_at, g.expires_at());
        until(|| async { Ok(queued(&b, &locker, key).await? == 0) }).await?;
        // It is a lease like any other: renewed, extended, released, handed on.
        let mut g = g;
        assert!(g.extend(Duration::from_secs(900)).await?);
        assert!(locker.lock_info(key).await?.context("held")?.expires_at > info.expires_at);
        assert!(g.release().await?);
        assert!(locker.lock_info(key).await?.is_none());

        // A grant the watchdog does not renew is taken up by a statement, so that it
        // lasts its whole TTL from then on the database clock.
        let guard = locker.acquire(key).await?;
        let waiter = locker.new_handle();
        let waiting =
            tokio::spawn(async move { waiter.lock(key).auto_renew(false).acquire().await });
        until(|| async { Ok(queued(&b, &locker, key).await? == 1) }).await?;
        assert!(guard.release().await?);
        let g = tokio::time::timeout(DEADLINE, waiting).await???;
        let info = locker.lock_info(key).await?.context("held")?;
        assert_eq!(info.expires_at, g.expires_at());
        let lasts = info.expires_at - info.acquired_at;
        assert!(
            lasts >= chrono::Duration::seconds(600),
            "an unrenewed fair grant lasts {lasts} from its handoff, not its TTL"
        );
        assert_eq!(queued(&b, &locker, key).await?, 0);
        assert!(g.release().await?);
    }
    Ok(())
}

/// How long [`a_busy_head_place_delays_a_handoff_never_skips_it`] keeps the head's
/// place locked: longer than a step waits for it on MariaDB (a second), so that the
/// release meets it busy at least once.
const HEAD_BUSY: Duration = Duration::from_millis(2500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_head_place_delays_a_handoff_never_skips_it() -> anyhow::Result<()> {
    for b in common::servers("fair_busy_head").await {
        b.fresh_table().await?;
        let base = b
            .builder()
            .await?
            .strategy(Strategy::Fair)
            .ttl(Duration::from_secs(600))
            .build()?;
        let key = "busy-head";
        let guard = base.acquire(key).await?;
        let waiter = base.new_handle();
        let waiter_owner = waiter.owner().to_string();
        let waiting = tokio::spawn(async move { waiter.acquire(key).await });
        until(|| async { Ok(queued(&b, &base, key).await? == 1) }).await?;

        // Another transaction keeps the head's place locked, as a renewal of it does
        // for a moment: here, for longer.
        let queue = match b.dialect {
            Dialect::MySql => format!("`{}_queue`", b.table),
            _ => format!("\"{}_queue\"", b.table),
        };
        let lock_place = format!("SELECT ticket FROM {queue} WHERE lock_key = '{key}' FOR UPDATE");
        let blocker = match base.pool() {
            sqlock::DbPool::Postgres(p) => {
                let mut tx = p.begin().await?;
                sqlx::query(sqlx::AssertSqlSafe(lock_place))
                    .fetch_all(&mut *tx)
                    .await?;
                Blocker::Postgres(tx)
            }
            sqlock::DbPool::MySql(p) => {
                let mut tx = p.begin().await?;
                sqlx::query(sqlx::AssertSqlSafe(lock_place))
                    .fetch_all(&mut *tx)
                    .await?;
                Blocker::MySql(tx)
            }
            _ => anyhow::bail!("a server"),
        };

        // A lease newcomer tries the key without pause until the waiter holds.
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let newcomer = base.new_handle();
        let rival = tokio::spawn(async move {
            let mut tries = 0u64;
            while !*stopped.borrow() {
                tries += 1;
                if let Some(g) = newcomer
                    .lock(key)
                    .strategy(Strategy::Lease)
                    .try_acquire()
                    .await?
                {
                    anyhow::bail!("a lease newcomer took {key} (token {})", g.fencing_token());
                }
            }
            Ok(tries)
        });
        let held = guard.fencing_token();
        let releasing = tokio::spawn(async move { guard.release().await });
        tokio::time::sleep(HEAD_BUSY).await;
        // The release met the head's place busy and waits, or tries again: it has not
        // gone through without the head.
        assert!(
            !releasing.is_finished(),
            "{}: the release went through while the head's place was busy: {:?}",
            b.dialect,
            releasing.await?
        );
        blocker.commit().await?;

        let g = tokio::time::timeout(DEADLINE, waiting).await???;
        assert!(tokio::time::timeout(DEADLINE, releasing).await???);
        stop.send_replace(true);
        let tries = rival.await??;
        assert!(tries > 0, "{}: the newcomer never tried", b.dialect);
        let info = base.lock_info(key).await?.context("handed on")?;
        assert_eq!(
            info.owner, waiter_owner,
            "{}: not handed to the head",
            b.dialect
        );
        assert_eq!(info.fencing_token, g.fencing_token());
        assert!(g.fencing_token() > held, "{}", b.dialect);
        assert!(g.release().await?);
    }
    Ok(())
}

/// An open transaction of a test's own, on either server.
enum Blocker {
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
    MySql(sqlx::Transaction<'static, sqlx::MySql>),
}

impl Blocker {
    async fn commit(self) -> anyhow::Result<()> {
        match self {
            Self::Postgres(tx) => tx.commit().await?,
            Self::MySql(tx) => tx.commit().await?,
        }
        Ok(())
    }
}

/// A waiter whose place lapsed (its renewals held up past its TTL) joins the queue again
/// at the end, and the place it had goes at once, not at the next sweep: a place never
/// outlives the wait it belonged to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_place_goes_when_its_waiter_joins_again() -> anyhow::Result<()> {
    for b in common::backends("fair_lapsed_place").await {
        b.fresh_table().await?;
        let holder = fair::locker(&b, Duration::from_secs(60)).await?;
        // A TTL of 3 s: every look of the first waiter falls due to renew its place.
        let short = b
            .builder()
            .await?
            .strategy(Strategy::Fair)
            .ttl(Duration::from_secs(3))
            .poll_interval(Duration::from_millis(50), Duration::from_millis(100))
            .build()?;
        let key = "lapsed";
        let guard = holder.acquire(key).await?;
        let owner = short.owner().to_string();
        let waiting = take_turn(short, key);
        until(|| async { Ok(queued(&b, &holder, key).await? == 1) }).await?;
        // Its place lapses: as if its renewals had been held up for longer than its TTL.
        let (q, past) = match b.dialect {
            Dialect::Postgres => (
                format!("\"{}_queue\"", b.table),
                "statement_timestamp() - INTERVAL '1 second'",
            ),
            Dialect::MySql => (
                format!("`{}_queue`", b.table),
                "UTC_TIMESTAMP(6) - INTERVAL 1 SECOND",
            ),
            _ => (format!("\"{}_queue\"", b.table), "expires_at - 3600000000"),
        };
        let first = b
            .scalar(
                holder.pool(),
                &format!("SELECT MIN(ticket) FROM {q} WHERE lock_key = '{key}'"),
            )
            .await?;
        b.script(
            holder.pool(),
            &format!("UPDATE {q} SET expires_at = {past} WHERE ticket = {first}"),
        )
        .await?;
        // It joins again, and its old place is gone.
        let tickets = format!(
            "SELECT COALESCE(MAX(ticket), 0) FROM {q} WHERE lock_key = '{key}' \
             AND lock_owner = '{owner}'"
        );
        until(|| async { Ok(b.scalar(holder.pool(), &tickets).await? > first) }).await?;
        until(|| async { Ok(queued(&b, &holder, key).await? == 1) })
            .await
            .with_context(|| format!("{}: the lapsed place stayed", b.dialect))?;
        let held = guard.fencing_token();
        assert!(guard.release().await?);
        let token = tokio::time::timeout(DEADLINE, waiting).await???;
        assert!(token > held, "{}", b.dialect);
        assert_eq!(queued(&b, &holder, key).await?, 0, "{}", b.dialect);
    }
    Ok(())
}

/// A fair release nobody is queued for frees the lock in one statement without the
/// key's gate, and a fair acquisition nobody is queued for takes it in one: a waiter
/// whose join commits while a release runs is never left queued behind a free lock.
/// Rounds in which a holder releases just as a waiter arrives (on a pool apart, so that
/// no wake-up of this process reaches it, and polling once a minute, so that no poll
/// of its own can mend a lock left free): after the release, the table never shows the
/// lock free with the waiter's place queued and no grant handed to it; the waiter
/// either takes the free lock as it arrives or is handed it by the release.
#[tokio::test]
async fn a_release_racing_a_join_leaves_no_free_lock_behind_a_waiter() -> anyhow::Result<()> {
    const ROUNDS: u32 = 24;
    for b in common::backends("fair_race").await {
        b.fresh_table().await?;
        let d = b.dialect;
        let ttl = Duration::from_secs(60);
        let holder = b
            .builder()
            .await?
            .strategy(Strategy::Fair)
            .ttl(ttl)
            .build()?;
        let waiter = b
            .builder_apart()
            .await?
            .strategy(Strategy::Fair)
            .ttl(ttl)
            .poll_interval(Duration::from_secs(60), Duration::from_secs(60))
            .build()?;
        let key = "race";
        let stranded = stranded_sql(&b, key);
        let handed = format!(
            "SELECT COUNT(*) FROM {} WHERE lock_key = '{key}' AND granted_token IS NOT NULL",
            queue_of(&b)
        );
        let (mut took, mut given) = (0, 0);
        for round in 0..ROUNDS {
            let guard = holder.acquire(key).await?;
            let w = waiter.clone();
            let waiting = tokio::spawn(async move { w.acquire(key).await });
            // The release at a different point of the waiter's arrival each round.
            match round % 3 {
                0 => tokio::task::yield_now().await,
                n => tokio::time::sleep(Duration::from_millis(u64::from(n))).await,
            }
            assert!(guard.release().await?, "{d}");
            let deadline = tokio::time::Instant::now() + DEADLINE;
            loop {
                assert_eq!(
                    b.scalar(holder.pool(), &stranded).await?,
                    0,
                    "{d}, round {round}: the lock stands free behind a queued waiter"
                );
                if waiting.is_finished() {
                    let g = waiting.await??;
                    assert!(g.release().await?, "{d}");
                    took += 1;
                    break;
                }
                if b.scalar(holder.pool(), &handed).await? > 0 {
                    // Handed on by the release: the waiter would take it up at its
                    // next look, a minute on. It stops waiting instead, giving it back.
                    waiting.abort();
                    given += 1;
                    break;
                }
                anyhow::ensure!(tokio::time::Instant::now() < deadline, "{d}: stuck");
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            until(|| async {
                Ok(queued(&b, &holder, key).await? == 0 && holder.lock_info(key).await?.is_none())
            })
            .await?;
        }
        println!("{d}: taken on arrival {took}, handed on by the release {given}");
    }
    Ok(())
}

/// A waiter that joins while the holder writes in a fenced transaction, which keeps the
/// key's row shared-locked (fence.sql), queues at once rather than waiting for the
/// transaction (or being turned away until it ends): its join leaves the row unmarked
/// and commits its place. The place alone then keeps the lock from a newcomer: the
/// holder's release hands the lock to the waiter, and a fair newcomer that arrives
/// after the fenced transaction queues behind it.
#[tokio::test]
async fn a_join_behind_a_fenced_transaction_queues_at_once_and_keeps_its_turn() -> anyhow::Result<()>
{
    for b in common::servers("fair_fenced").await {
        b.fresh_table().await?;
        let d = b.dialect;
        let ttl = Duration::from_secs(60);
        let fair_locker = || async {
            anyhow::Ok(
                b.builder_apart()
                    .await?
                    .strategy(Strategy::Fair)
                    .ttl(ttl)
                    .build()?,
            )
        };
        let holder = fair_locker().await?;
        let (waiter, newcomer) = (fair_locker().await?, fair_locker().await?);
        let key = "fenced";
        let flagged = format!(
            "SELECT COUNT(*) FROM {} WHERE lock_key = '{key}' AND queued",
            b.quoted()
        );
        let guard = holder.acquire(key).await?;
        macro_rules! behind_the_fence {
            ($p:expr) => {{
                let mut tx = $p.begin().await?;
                guard.fence(&mut *tx).await?;
                let w = waiter.clone();
                let waiting = tokio::spawn(async move { w.acquire(key).await });
                // Queued while the fenced transaction is still open: the join neither
                // waited for it nor was turned away.
                tokio::time::timeout(
                    Duration::from_secs(10),
                    until(|| async { Ok(queued(&b, &holder, key).await? == 1) }),
                )
                .await
                .with_context(|| format!("{d}: the join waited for the fenced transaction"))??;
                // The fault took: the join met the row locked and left it unmarked.
                assert_eq!(
                    b.scalar(holder.pool(), &flagged).await?,
                    0,
                    "{d}: the join marked a row the fence kept locked"
                );
                tx.commit().await?;
                waiting
            }};
        }
        let waiting = match holder.pool() {
            sqlock::DbPool::Postgres(p) => behind_the_fence!(p),
            sqlock::DbPool::MySql(p) => behind_the_fence!(p),
            _ => anyhow::bail!("not a server"),
        };
        // A newcomer after the fence: its one statement sees the waiter's place.
        let n = newcomer.clone();
        let coming = tokio::spawn(async move { n.acquire(key).await });
        until(|| async { Ok(queued(&b, &holder, key).await? == 2) }).await?;
        assert!(guard.release().await?, "{d}");
        let first = tokio::time::timeout(DEADLINE, waiting)
            .await
            .with_context(|| format!("{d}: the queued waiter was passed"))???;
        assert!(
            !coming.is_finished(),
            "{d}: the newcomer holds the lock too"
        );
        assert!(first.release().await?, "{d}");
        let second = tokio::time::timeout(DEADLINE, coming).await???;
        assert!(second.release().await?, "{d}");
        until(|| async { Ok(queued(&b, &holder, key).await? == 0) }).await?;
    }
    Ok(())
}

/// The fair queue's table of `b`.
fn queue_of(b: &common::Backend) -> String {
    match b.dialect {
        Dialect::MySql => format!("`{}_queue`", b.table),
        _ => format!("\"{}_queue\"", b.table),
    }
}

/// How many live places of `key` have no grant while its lock stands free (released,
/// not lapsed: the tests that use it hold long leases).
fn stranded_sql(b: &common::Backend, key: &str) -> String {
    let free = match b.dialect {
        Dialect::Postgres => "NOT l.locked",
        _ => "l.locked = 0",
    };
    format!(
        "SELECT COUNT(*) FROM {q} AS q JOIN {t} AS l ON l.lock_key = q.lock_key \
         WHERE q.lock_key = '{key}' AND q.granted_token IS NULL AND {free}",
        q = queue_of(b),
        t = b.quoted()
    )
}
