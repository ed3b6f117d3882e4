//! One key, one strategy, enforced by the database: whichever strategy holds a key,
//! a request of another strategy for it finds it held. It neither takes the key over
//! nor waits for the whole hold: `try_acquire` says `None` at once and a deadline ends
//! in `Error::Timeout`, while the holder keeps its lock and releases it as its own.
//! Afterwards the other strategy takes the key.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::time::{Duration, Instant};

use sqlock::{Dialect, Error, Strategy};
use tokio::time::timeout;

/// A liveness bound only: the calls under it answer in milliseconds when they work.
const GUARD: Duration = Duration::from_secs(10);

const STRATEGIES: [Strategy; 3] = [Strategy::Lease, Strategy::Insert, Strategy::ForUpdate];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_excludes_the_other_strategies() -> anyhow::Result<()> {
    holder_excludes_the_others(common::backends("xs_lease").await, Strategy::Lease).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insert_lock_excludes_the_other_strategies() -> anyhow::Result<()> {
    holder_excludes_the_others(common::backends("xs_insert").await, Strategy::Insert).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_for_update_lock_excludes_the_other_strategies() -> anyhow::Result<()> {
    holder_excludes_the_others(common::servers("xs_for_update").await, Strategy::ForUpdate).await
}

/// Every other strategy against a holder of `holder`, each pair on a key of its own;
/// the pairs with the for-update strategy on the servers only. Every pair is checked,
/// and the test fails with the list of everything that went wrong.
async fn holder_excludes_the_others(
    backends: Vec<common::Backend>,
    holder: Strategy,
) -> anyhow::Result<()> {
    let mut problems = Vec::new();
    for b in backends {
        b.fresh_table().await?;
        for contender in STRATEGIES {
            let for_update = holder == Strategy::ForUpdate || contender == Strategy::ForUpdate;
            if contender == holder || (for_update && b.dialect == Dialect::Sqlite) {
                continue;
            }
            let found = check_pair(&b, holder, contender).await?;
            problems.extend(
                found
                    .into_iter()
                    .map(|p| format!("{}, {holder} holder, {contender} contender: {p}", b.dialect)),
            );
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    Ok(())
}

/// What went wrong when a `holder` lock on a key meets `contender` requests for it.
async fn check_pair(
    b: &common::Backend,
    holder: Strategy,
    contender: Strategy,
) -> anyhow::Result<Vec<String>> {
    let key = format!("{holder}-holds-{contender}-asks");
    let mut problems = Vec::new();
    let a = b.locker().await?;
    let other = b.locker().await?;
    let g = a
        .lock(&key)
        .strategy(holder)
        .try_acquire()
        .await?
        .expect("the key is free");

    match timeout(GUARD, other.lock(&key).strategy(contender).try_acquire()).await {
        Ok(Ok(None)) => {}
        Ok(Ok(Some(taken))) => {
            problems.push("try_acquire took a key another strategy holds".to_owned());
            let _ = taken.rollback().await;
        }
        Ok(Err(e)) => problems.push(format!("try_acquire failed: {e:?}")),
        Err(_) => problems.push(format!("try_acquire did not return within {GUARD:?}")),
    }

    let waited = other
        .lock(&key)
        .strategy(contender)
        .acquire_timeout(Duration::from_millis(300));
    match timeout(GUARD, waited).await {
        Ok(Err(Error::Timeout { .. })) => {}
        Ok(Ok(taken)) => {
            problems.push("acquire_timeout(300ms) took a key another strategy holds".to_owned());
            let _ = taken.rollback().await;
        }
        Ok(Err(e)) => problems.push(format!(
            "acquire_timeout(300ms): expected Error::Timeout, got {e:?}"
        )),
        Err(_) => problems.push(format!(
            "acquire_timeout(300ms) did not return within {GUARD:?}"
        )),
    }

    if g.is_lost() {
        problems.push(format!(
            "the holder's lost signal fired: {:?}",
            g.lost().reason()
        ));
    }
    // For a for-update holder, release commits.
    match timeout(GUARD, g.release()).await {
        Ok(Ok(true)) => {}
        other => problems.push(format!(
            "the holder's release: expected Ok(true), got {other:?}"
        )),
    }

    // Free now: the other strategy takes it.
    match timeout(GUARD, other.lock(&key).strategy(contender).try_acquire()).await {
        Ok(Ok(Some(taken))) => match taken.release().await {
            Ok(true) => {}
            r => problems.push(format!(
                "the contender's release after taking the freed key: {r:?}"
            )),
        },
        r => problems.push(format!(
            "after the holder's release, try_acquire: expected Some, got {r:?}"
        )),
    }
    Ok(problems)
}

/// A lease holder that lapsed, whose key a for-update lock then took, is told so by
/// every call it still makes, within each call's documented bound, and none takes
/// anything from the for-update holder. PostgreSQL's never wait on the row lock; on
/// MariaDB the fence waits on it for two seconds and extend and release for one, each
/// then asking without waiting (see their statements in `sql/mysql/`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_lease_holder_never_waits_on_the_for_update_holder() -> anyhow::Result<()> {
    for b in common::servers("xs_lapsed").await {
        let d = b.dialect;
        let stale = b.fresh_table().await?;
        let mut old = stale
            .lock("k")
            .ttl(Duration::from_millis(300))
            .auto_renew(false)
            .try_acquire()
            .await?
            .expect("free");
        // Wait, by the database's own clock, until the lease has expired.
        let now = match d {
            Dialect::Postgres => "clock_timestamp()",
            _ => "UTC_TIMESTAMP(6)",
        };
        let expired = format!(
            "SELECT count(*) FROM {} WHERE lock_key = 'k' AND expires_at <= {now}",
            b.quoted()
        );
        while b.scalar(stale.pool(), &expired).await? == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let fu = b.locker().await?;
        let held = fu
            .lock("k")
            .strategy(Strategy::ForUpdate)
            .try_acquire()
            .await?
            .expect("the lease lapsed: the key is free");

        // The documented waits on the row lock, and three seconds for the statements
        // around them on a busy machine (the for-update holder holds for the whole
        // test: a call that waited on it would not answer within the guard).
        let (fence_wait, extend_wait, release_wait) = match d {
            Dialect::Postgres => (Duration::ZERO, Duration::ZERO, Duration::ZERO),
            _ => (
                Duration::from_secs(2),
                Duration::from_secs(1),
                Duration::from_secs(1),
            ),
        };
        let slack = Duration::from_secs(3);
        let mut took = Vec::new();
        let started = Instant::now();
        let fenced = timeout(GUARD, async {
            match stale.pool() {
                sqlock::DbPool::Postgres(p) => {
                    let mut tx = p.begin().await?;
                    old.fence(&mut *tx).await
                }
                sqlock::DbPool::MySql(p) => {
                    let mut tx = p.begin().await?;
                    old.fence(&mut *tx).await
                }
                _ => unreachable!("servers only"),
            }
        })
        .await?;
        took.push(("fence", started.elapsed(), fence_wait));
        assert!(
            matches!(fenced, Err(Error::LockLost { .. })),
            "{d}: fence: {fenced:?}"
        );
        let started = Instant::now();
        let extended = timeout(GUARD, old.extend(Duration::from_secs(30))).await??;
        took.push(("extend", started.elapsed(), extend_wait));
        assert!(!extended, "{d}: extended a lapsed lease");
        let started = Instant::now();
        let released = timeout(GUARD, old.release()).await??;
        took.push(("release", started.elapsed(), release_wait));
        assert!(!released, "{d}: released a lapsed lease");
        for (call, took, wait) in took {
            println!("{d}: the lapsed holder's {call} answered in {took:?}");
            assert!(
                took <= wait + slack,
                "{d}: the lapsed holder's {call} took {took:?}, over its bound of {wait:?} \
                 of waiting on the row lock"
            );
        }
        assert!(!held.is_lost(), "{d}: the for-update holder lost its lock");
        assert!(held.release().await?, "{d}");
    }
    Ok(())
}

/// A handle's own hold is not re-entered with another strategy: the same handle (or a
/// clone of it) asking for a key it holds, with another strategy, gets
/// `Error::StrategyConflict` at once, before any SQL, from `try_acquire` and from a
/// waiting call alike; the hold keeps its strategy and token. Once it is released, the
/// other strategy takes the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_handle_cannot_take_its_key_with_another_strategy() -> anyhow::Result<()> {
    let mut problems = Vec::new();
    for b in common::backends("xs_same").await {
        b.fresh_table().await?;
        for held in STRATEGIES {
            for asked in STRATEGIES {
                let for_update = held == Strategy::ForUpdate || asked == Strategy::ForUpdate;
                if asked == held || (for_update && b.dialect == Dialect::Sqlite) {
                    continue;
                }
                let what = format!("{}, {held} held, {asked} asked", b.dialect);
                let key = format!("{held}-{asked}");
                let h = b.builder().await?.strategy(held).build()?;
                let g = h.try_acquire(&key).await?.expect("free");
                let token = g.fencing_token();
                for who in [h.clone(), h.clone()] {
                    let tried =
                        timeout(GUARD, who.lock(&key).strategy(asked).try_acquire()).await?;
                    let waited = timeout(
                        GUARD,
                        who.lock(&key)
                            .strategy(asked)
                            .acquire_timeout(Duration::from_secs(30)),
                    )
                    .await;
                    for (call, r) in [
                        ("try_acquire", tried.map(|_| ())),
                        (
                            "acquire_timeout",
                            match waited {
                                Ok(r) => r.map(|_| ()),
                                Err(_) => {
                                    problems.push(format!("{what}: acquire_timeout waited"));
                                    continue;
                                }
                            },
                        ),
                    ] {
                        match r {
                            Err(Error::StrategyConflict {
                                held: h2,
                                requested,
                                ..
                            }) if h2 == held && requested == asked => {}
                            r => problems.push(format!("{what}: {call} answered {r:?}")),
                        }
                    }
                }
                if held != Strategy::ForUpdate {
                    let info = h.lock_info(&key).await?.expect("listed");
                    if info.strategy != held.name() || info.fencing_token != token {
                        problems.push(format!("{what}: the hold changed: {info:?}"));
                    }
                }
                if !g.release().await? {
                    problems.push(format!("{what}: the hold was not released as its own"));
                }
                match h.lock(&key).strategy(asked).try_acquire().await? {
                    Some(g) => drop(g.release().await?),
                    None => problems.push(format!("{what}: not free after the release")),
                }
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    Ok(())
}

/// The database keeps the same rule when a handle's two strategies race for a free key
/// (neither holds it yet, so no hold of the handle can refuse the second before SQL):
/// one of them gets it, the other is answered busy or `StrategyConflict`, and the row
/// keeps the winner's strategy. Never both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_strategies_of_one_handle_leave_one_holder() -> anyhow::Result<()> {
    const ROUNDS: usize = 50;
    let mut problems = Vec::new();
    for b in common::backends("xs_race").await {
        b.fresh_table().await?;
        let h = b.locker().await?;
        for round in 0..ROUNDS {
            let key = format!("race-{round}");
            let (lease, insert) = tokio::join!(
                h.lock(&key).strategy(Strategy::Lease).try_acquire(),
                h.lock(&key).strategy(Strategy::Insert).try_acquire(),
            );
            let answer = |r: &sqlock::Result<Option<sqlock::LockGuard>>| match r {
                Ok(Some(g)) => format!("held (token {})", g.fencing_token()),
                Ok(None) => "busy".to_owned(),
                Err(Error::StrategyConflict { .. }) => "conflict".to_owned(),
                Err(e) => format!("error: {e}"),
            };
            let (a, c) = (answer(&lease), answer(&insert));
            let winner = match (a.starts_with("held"), c.starts_with("held")) {
                (true, false) if c == "busy" || c == "conflict" => Strategy::Lease,
                (false, true) if a == "busy" || a == "conflict" => Strategy::Insert,
                _ => {
                    problems.push(format!("{} {key}: lease {a}, insert {c}", b.dialect));
                    for g in [lease, insert].into_iter().flatten().flatten() {
                        drop(g.release().await);
                    }
                    continue;
                }
            };
            let info = h.lock_info(&key).await?.expect("held");
            if info.strategy != winner.name() {
                problems.push(format!(
                    "{} {key}: {winner} won, the row says {}",
                    b.dialect, info.strategy
                ));
            }
            for g in [lease, insert].into_iter().flatten().flatten() {
                g.release().await?;
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    Ok(())
}
