//! Multi-locks (`Locker::lock_many`): all keys or none, no deadlock between sets that
//! overlap in any order, one key one strategy, one lost signal, deadlines, cancel
//! safety and bad input, on every backend.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use common::eventually;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use sqlock::{Dialect, Error, Strategy};

/// A bound on waits that are expected to end much sooner.
const DEADLINE: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_keys_or_none() -> anyhow::Result<()> {
    for b in common::backends("multi_all").await {
        let locker = b.fresh_table().await?;
        let pool = locker.pool().clone();
        let other = locker.new_handle();
        let held = other.acquire("b").await?;
        // "b" is another owner's: the set takes nothing, not even "a" and "c".
        assert!(locker
            .lock_many(&["c", "b", "a"])
            .try_acquire()
            .await?
            .is_none());
        assert_eq!(b.held_rows(&pool).await?, 1, "{}: a partial set", b.dialect);
        let waited = locker
            .lock_many(&["a", "b"])
            .acquire_timeout(Duration::from_millis(100))
            .await;
        assert!(
            matches!(waited, Err(Error::Timeout { .. })),
            "{}: {waited:?}",
            b.dialect
        );
        assert_eq!(b.held_rows(&pool).await?, 1);
        assert!(held.release().await?);
        // Free now: all three, sorted, each with a token, each busy for others.
        let set = locker
            .lock_many(&["c", "b", "a", "b"])
            .timeout(DEADLINE)
            .acquire()
            .await?;
        assert_eq!(set.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(b.held_rows(&pool).await?, 3);
        for key in ["a", "b", "c"] {
            assert!(other.try_acquire(key).await?.is_none(), "{key}");
            assert!(set.fencing_token(key).is_some_and(|t| t > 0));
        }
        assert!(other.lock_many(&["z", "c"]).try_acquire().await?.is_none());
        // This handle's own lease on a key of the set is a re-entry.
        let again = locker.try_acquire("a").await?.expect("re-entry");
        assert_eq!(again.hold_count(), 2);
        assert!(again.release().await?);
        // Tokens rise from one grant of a key to the next.
        let before: Vec<i64> = set.tokens().map(|(_, t)| t).collect();
        assert!(set.release().await?);
        assert_eq!(b.held_rows(&pool).await?, 0);
        let next = other.lock_many(&["a", "b", "c"]).try_acquire().await?;
        let next = next.expect("free after the release");
        for ((_, t), old) in next.tokens().zip(before) {
            assert!(t > old, "{}: token {t} after {old}", b.dialect);
        }
        assert!(next.release().await?);
        // Keys that need escaping on their way to the server are the very keys taken.
        let odd = ["q\"uote", "back\\slash", "tab\tkey", "ünï", "[1]", "a,b"];
        let set = locker.lock_many(&odd).try_acquire().await?.expect("free");
        for key in odd {
            assert!(
                other.try_acquire(key).await?.is_none(),
                "{}: {key:?}",
                b.dialect
            );
            assert!(set.fencing_token(key).is_some(), "{key:?}");
        }
        assert!(set.release().await?);
        assert_eq!(b.held_rows(&pool).await?, 0);
    }
    Ok(())
}

#[tokio::test]
async fn bad_input_is_refused_before_sql() -> anyhow::Result<()> {
    // No table at all: any SQL sent would fail with MissingTable instead.
    for b in common::backends("multi_bad_no_table").await {
        let locker = b.locker().await?;
        let drop = format!("DROP TABLE IF EXISTS {}", b.quoted());
        b.script(locker.pool(), &drop).await?;
        let none: [&str; 0] = [];
        assert!(matches!(
            locker.lock_many(&none).try_acquire().await,
            Err(Error::NoKeys)
        ));
        assert!(matches!(
            locker.lock_many(&["a", ""]).acquire().await,
            Err(Error::EmptyKey)
        ));
        assert!(matches!(
            locker.lock_many(&["a\0b"]).try_acquire().await,
            Err(Error::KeyContainsNul)
        ));
        let long = "k".repeat(sqlock::MAX_KEY_BYTES + 1);
        assert!(matches!(
            locker.lock_many(&[long]).try_acquire().await,
            Err(Error::KeyTooLong { .. })
        ));
        let many: Vec<String> = (0..=sqlock::MAX_MULTI_LOCK_KEYS)
            .map(|i| format!("k{i}"))
            .collect();
        assert!(matches!(
            locker.lock_many(&many).try_acquire().await,
            Err(Error::TooManyKeys { count, max }) if count == max + 1
        ));
        assert!(matches!(
            locker
                .lock_many(&["a", "semaphore:s#0"])
                .try_acquire()
                .await,
            Err(Error::ReservedKey { .. })
        ));
        assert!(matches!(
            locker.write_lock("semaphore:s").try_acquire().await,
            Err(Error::ReservedKey { .. })
        ));
        // Repeats count once.
        let repeated: Vec<String> = (0..sqlock::MAX_MULTI_LOCK_KEYS * 2)
            .map(|i| format!("k{}", i % sqlock::MAX_MULTI_LOCK_KEYS))
            .collect();
        assert!(matches!(
            locker.lock_many(&repeated).try_acquire().await,
            Err(Error::MissingTable { .. })
        ));
        assert!(matches!(
            locker
                .lock_many(&["a"])
                .ttl(Duration::from_millis(1))
                .try_acquire()
                .await,
            Err(Error::TtlTooShort { .. })
        ));
    }
    for b in common::backends("multi_bad").await {
        // A key this handle holds with another strategy.
        let insert = b.fresh_table().await?;
        let g = insert
            .lock("i")
            .strategy(Strategy::Insert)
            .acquire()
            .await?;
        assert!(matches!(
            insert.lock_many(&["h", "i"]).try_acquire().await,
            Err(Error::StrategyConflict { .. })
        ));
        g.release().await?;
    }
    Ok(())
}

/// Many handles take overlapping sets, each given in an order of its own (half of
/// them reversed), under a deadline: every one gets its set, none sees a deadlock
/// error, and no key is ever held by two at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_sets_in_opposite_orders_never_deadlock() -> anyhow::Result<()> {
    for b in common::backends("multi_order").await {
        let locker = b.fresh_table().await?;
        let holders: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let keys = ["k0", "k1", "k2", "k3", "k4"];
        let mut tasks = Vec::new();
        for worker in 0..8usize {
            let handle = b
                .builder()
                .await?
                .poll_interval(Duration::from_millis(1), Duration::from_millis(20))
                .build()?;
            let holders = holders.clone();
            tasks.push(tokio::spawn(async move {
                for round in 0..10usize {
                    // Three keys out of five, overlapping the others' sets.
                    let start = (worker + round) % keys.len();
                    let mut set: Vec<&str> =
                        (0..3).map(|i| keys[(start + i) % keys.len()]).collect();
                    if worker % 2 == 1 {
                        set.reverse();
                    }
                    let guard = handle.lock_many(&set).acquire_timeout(DEADLINE).await?;
                    for key in &set {
                        let mut h = holders.lock().unwrap();
                        let n = h.entry((*key).to_owned()).or_insert(0);
                        *n += 1;
                        assert_eq!(*n, 1, "{key} held twice");
                    }
                    tokio::task::yield_now().await;
                    for key in &set {
                        *holders.lock().unwrap().get_mut(*key).unwrap() -= 1;
                    }
                    assert!(guard.release().await?, "the set was lost");
                }
                anyhow::Ok(())
            }));
        }
        for t in tasks {
            t.await??;
        }
        assert_eq!(b.held_rows(locker.pool()).await?, 0);
        println!(
            "{}: 8 workers x 10 overlapping sets, no deadlock",
            b.dialect
        );
    }
    Ok(())
}

/// A multi-lock and a lock of every other strategy race for brand-new keys: never
/// both, and each waits for the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_one_strategy_on_brand_new_keys() -> anyhow::Result<()> {
    for b in common::backends("multi_cross").await {
        let multi = b.fresh_table().await?;
        let mut others = vec![Strategy::Lease, Strategy::Insert, Strategy::Fair];
        if b.dialect != Dialect::Sqlite {
            others.push(Strategy::ForUpdate);
        }
        for other in others {
            let rival = multi.new_handle();
            for round in 0..10 {
                let key = format!("new-{other}-{round}");
                let side = format!("side-{other}-{round}");
                let (m, o) = tokio::join!(
                    multi.lock_many(&[&key, &side]).try_acquire(),
                    rival.lock(&key).strategy(other).try_acquire()
                );
                let (m, o) = (m?, o?);
                assert!(
                    m.is_none() || o.is_none(),
                    "{}: a multi-lock and {other} both hold {key}",
                    b.dialect
                );
                if let Some(g) = m {
                    assert!(rival
                        .lock(&key)
                        .strategy(other)
                        .try_acquire()
                        .await?
                        .is_none());
                    assert!(g.release().await?);
                }
                if let Some(g) = o {
                    assert!(multi
                        .lock_many(&[&side, &key])
                        .try_acquire()
                        .await?
                        .is_none());
                    g.release().await?;
                }
            }
            // A multi-lock waits for the other strategy's holder, and the reverse.
            let key = format!("wait-{other}");
            let g = rival.lock(&key).strategy(other).acquire().await?;
            let waited = multi
                .lock_many(&["w", key.as_str()])
                .acquire_timeout(Duration::from_millis(50))
                .await;
            assert!(matches!(waited, Err(Error::Timeout { .. })), "{waited:?}");
            g.release().await?;
            let set = multi
                .lock_many(&["w", key.as_str()])
                .acquire_timeout(DEADLINE)
                .await?;
            let waited = rival
                .lock(&key)
                .strategy(other)
                .acquire_timeout(Duration::from_millis(50))
                .await;
            assert!(matches!(waited, Err(Error::Timeout { .. })), "{waited:?}");
            assert!(set.release().await?);
        }
    }
    Ok(())
}

/// One key of the set taken away fires the set's lost signal; the other keys are
/// still released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_lost_is_the_set_lost() -> anyhow::Result<()> {
    for b in common::backends("multi_lost").await {
        let locker = b.fresh_table().await?;
        let set = locker
            .lock_many(&["p", "q", "r"])
            .ttl(Duration::from_secs(3))
            .acquire()
            .await?;
        let mut lost = set.lost();
        assert!(!set.is_lost());
        // An operator frees "q"; the watchdog's next renewal finds it gone.
        assert!(locker.force_release_now("q").await?);
        let reason = tokio::time::timeout(DEADLINE, lost.wait()).await?;
        assert_eq!(reason, sqlock::LostReason::NotHeld);
        assert!(set.is_lost());
        // The release says not every key was still held, and frees the others.
        assert!(!set.release().await?);
        assert_eq!(b.held_rows(locker.pool()).await?, 0);
        // Renewed by the watchdog: a set held past its first expiry is still held. The
        // TTL leaves a loaded machine two renewal ticks of slack before a lapse.
        let set = locker
            .lock_many(&["p", "q"])
            .ttl(Duration::from_secs(3))
            .acquire()
            .await?;
        // Renewed by the watchdog: each key's expiry moves past the one it was granted
        // with, on the database clock (a bounded wait, not a timed assertion).
        let first = set.expires_at();
        let other = locker.new_handle();
        let mut renewed = false;
        for _ in 0..3000 {
            let mut both = true;
            for key in ["p", "q"] {
                let info = locker.lock_info(key).await?;
                both &= info.is_some_and(|i| i.expires_at > first);
            }
            if both {
                renewed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(renewed, "{}: the watchdog did not renew", b.dialect);
        assert!(!set.is_lost());
        assert!(other.lock_many(&["q"]).try_acquire().await?.is_none());
        assert!(set.release().await?);
    }
    Ok(())
}

/// Acquisitions cut off at random points leave no key held and no connection taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_off_acquisitions_leak_nothing() -> anyhow::Result<()> {
    for b in common::backends("multi_cancel").await {
        b.fresh_table().await?;
        let pool = b.pool_with(4).await?;
        let locker = sqlock::Locker::builder(pool.clone())
            .table(&b.table)
            .ttl(Duration::from_secs(600)) // only a release can free these rows in time
            .poll_interval(Duration::from_micros(200), Duration::from_millis(2))
            .build()?;
        let holder = b.locker().await?;
        let mut completed = 0;
        for i in 0..200u64 {
            let keys = [format!("k{}", i % 5), format!("k{}", (i + 2) % 5)];
            let blocker = if i % 7 == 0 {
                holder.try_acquire(&keys[1]).await?
            } else {
                None
            };
            let cut = Duration::from_micros(50 + (i * 137) % 4000);
            if let Ok(g) = tokio::time::timeout(cut, locker.lock_many(&keys).acquire()).await {
                completed += 1;
                drop(g?);
            }
            if let Some(g) = blocker {
                g.release().await?;
            }
        }
        let clean = eventually(|| {
            let (b, pool) = (&b, &pool);
            async move { Ok(b.held_rows(pool).await? == 0) }
        })
        .await?;
        assert!(clean, "{}: a key stayed held after a cut-off", b.dialect);
        let set = locker
            .lock_many(&["k0", "k1"])
            .try_acquire()
            .await?
            .expect("the pool is usable");
        assert!(set.release().await?);
        println!(
            "{}: 200 multi-lock acquisitions cut off at random ({completed} completed), table clean",
            b.dialect
        );
    }
    Ok(())
}

/// A lock held on another key, even a for-update lock, whose row stays locked for its
/// holder's whole transaction, never stands in a multi-lock's way: an attempt reads the
/// rows of its own keys alone, not the table. On the servers (SQLite has no row locks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_on_another_key_is_no_obstacle() -> anyhow::Result<()> {
    for b in common::servers("multi_other_key").await {
        let locker = b.fresh_table().await?;
        let other = locker.new_handle();
        // Rows of other keys around the set's, before and after them in key order.
        for key in ["a", "b", "c", "m", "z"] {
            let g = other.try_acquire(key).await?.expect("a free key");
            assert!(g.release().await?);
        }
        for held in ["a", "m", "z"] {
            let fu = other
                .lock(held)
                .strategy(Strategy::ForUpdate)
                .acquire_timeout(DEADLINE)
                .await?;
            for _ in 0..5 {
                let set = locker
                    .lock_many(&["b", "c"])
                    .try_acquire()
                    .await?
                    .with_context(|| {
                        format!("{}: busy while {held} was held for update", b.dialect)
                    })?;
                assert!(set.release().await?, "{}", b.dialect);
            }
            fu.release().await?;
        }
    }
    Ok(())
}
