//! The lease's basic behaviour, after ShedLock's storage tests, on every backend.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::time::Duration;

use chrono::Utc;

#[tokio::test]
async fn should_create_lock_and_not_return_second_lock() -> anyhow::Result<()> {
    for b in common::backends("basic_second").await {
        let a = b.fresh_table().await?;
        let other = b.locker().await?;
        let guard = a.try_acquire("k").await?.expect("a free lock is granted");
        assert_eq!(guard.key(), "k");
        assert_eq!(guard.owner(), a.owner());
        assert_eq!(guard.hold_count(), 1);
        assert!(
            other.try_acquire("k").await?.is_none(),
            "{}: second owner got a held lock",
            b.dialect
        );
        assert!(guard.release().await?);
    }
    Ok(())
}

#[tokio::test]
async fn should_create_two_independent_locks() -> anyhow::Result<()> {
    for b in common::backends("basic_two").await {
        let a = b.fresh_table().await?;
        let other = b.locker().await?;
        let one = a.try_acquire("one").await?.expect("one");
        let two = other
            .try_acquire("two")
            .await?
            .expect("two: keys are independent");
        assert!(
            one.release().await? && two.release().await?,
            "{}",
            b.dialect
        );
    }
    Ok(())
}

#[tokio::test]
async fn should_lock_twice_in_a_row_and_right_after_unlock() -> anyhow::Result<()> {
    for b in common::backends("basic_twice").await {
        let a = b.fresh_table().await?;
        let other = b.locker().await?;
        let first = a.try_acquire("k").await?.expect("first");
        let t1 = first.fencing_token();
        assert!(first.release().await?);
        let second = a.try_acquire("k").await?.expect("again after unlock");
        assert!(
            second.fencing_token() > t1,
            "{}: token must rise",
            b.dialect
        );
        let t2 = second.fencing_token();
        assert!(second.release().await?);
        let third = other
            .try_acquire("k")
            .await?
            .expect("other owner after unlock");
        assert!(third.fencing_token() > t2, "{}", b.dialect);
        assert!(third.release().await?);
    }
    Ok(())
}

#[tokio::test]
async fn should_create_lock_if_record_already_exists() -> anyhow::Result<()> {
    for b in common::backends("basic_exists").await {
        let a = b.fresh_table().await?;
        let t = b.quoted();
        // A row left behind by an earlier holder, free.
        let pool = a.pool().clone();
        let insert = match b.dialect {
            sqlock::Dialect::Postgres => format!(
                "INSERT INTO {t} (lock_key, lock_owner, locked, acquired_at, lock_time, lock_duration, expires_at, hold_count, fencing_token) \
                 VALUES ('k', 'gone', FALSE, now(), now(), 1000, now(), 0, 7)"
            ),
            sqlock::Dialect::MySql => format!(
                "INSERT INTO {t} (lock_key, lock_owner, locked, acquired_at, lock_time, lock_duration, expires_at, hold_count, fencing_token) \
                 VALUES ('k', 'gone', FALSE, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), 1000, UTC_TIMESTAMP(6), 0, 7)"
            ),
            _ => format!(
                "INSERT INTO {t} (lock_key, lock_owner, locked, acquired_at, lock_time, lock_duration, expires_at, hold_count, fencing_token) \
                 VALUES ('k', 'gone', 0, 0, 0, 1000, 0, 0, 7)"
            ),
        };
        b.script(&pool, &insert).await?;
        let guard = a.try_acquire("k").await?.expect("a free row is taken");
        assert!(guard.fencing_token() > 7, "{}", b.dialect);
        assert!(guard.release().await?);
    }
    Ok(())
}

#[tokio::test]
async fn should_be_able_to_extend_lock() -> anyhow::Result<()> {
    for b in common::backends("basic_extend").await {
        let a = b.fresh_table().await?;
        let other = b.locker().await?;
        let mut guard = a
            .lock("k")
            .ttl(Duration::from_secs(2))
            .try_acquire()
            .await?
            .expect("k");
        let before = guard.expires_at();
        assert!(
            guard.extend(Duration::from_secs(60)).await?,
            "{}",
            b.dialect
        );
        let after = guard.expires_at();
        assert!(
            after > before + chrono::Duration::seconds(50),
            "{}: {before} -> {after}",
            b.dialect
        );
        assert!(other.try_acquire("k").await?.is_none());
        // Extending keeps the token, and the extended lock can still be released.
        assert!(guard.release().await?, "{}", b.dialect);
    }
    Ok(())
}

#[tokio::test]
async fn should_not_be_able_to_extend_or_release_expired_lock() -> anyhow::Result<()> {
    for b in common::backends("basic_extend_expired").await {
        let a = b.fresh_table().await?;
        let mut guard = a.try_acquire("k").await?.expect("k");
        let expiry = guard.expires_at();
        b.expire(a.pool(), "k").await?;
        assert!(
            !guard.extend(Duration::from_secs(60)).await?,
            "{}",
            b.dialect
        );
        assert_eq!(
            guard.expires_at(),
            expiry,
            "a failed extend changes nothing"
        );
        assert!(
            !guard.release().await?,
            "{}: an expired lease is not ours",
            b.dialect
        );
    }
    Ok(())
}

#[tokio::test]
async fn lock_until_is_in_utc_on_the_database_clock() -> anyhow::Result<()> {
    for b in common::backends("basic_utc").await {
        let a = b.fresh_table().await?;
        let guard = a
            .lock("k")
            .ttl(Duration::from_secs(3600))
            .try_acquire()
            .await?
            .expect("k");
        // The database and this test share a host clock: the expiry is an hour from now
        // in UTC, give or take generous slack (this is not a timing test).
        let expected = Utc::now() + chrono::Duration::seconds(3600);
        let off = (guard.expires_at() - expected).num_seconds().abs();
        assert!(
            off < 120,
            "{}: expiry {} is {off}s from {expected}",
            b.dialect,
            guard.expires_at()
        );
        assert!(guard.release().await?);
    }
    Ok(())
}

#[tokio::test]
async fn dropped_guard_is_released_in_the_background() -> anyhow::Result<()> {
    for b in common::backends("basic_drop").await {
        let a = b.fresh_table().await?;
        let other = b.locker().await?;
        drop(
            a.lock("k")
                .ttl(Duration::from_secs(600))
                .try_acquire()
                .await?
                .expect("k"),
        );
        // The release runs in a spawned task: wait for it without sleeping blindly.
        let mut freed = None;
        for _ in 0..200 {
            if let Some(g) = other.try_acquire("k").await? {
                freed = Some(g);
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let g = freed.unwrap_or_else(|| panic!("{}: dropped guard was never released", b.dialect));
        assert!(g.release().await?);
    }
    Ok(())
}

#[tokio::test]
async fn missing_table_names_the_migration() -> anyhow::Result<()> {
    for b in common::backends("basic_missing").await {
        let pool = b.pool().await?;
        let locker = sqlock::Locker::builder(pool)
            .table("no_such_table_here")
            .build()?;
        let err = locker.try_acquire("k").await.expect_err("no table");
        assert!(
            matches!(err, sqlock::Error::MissingTable { .. }),
            "{}: {err:?}",
            b.dialect
        );
        assert!(err.to_string().contains("migrat"), "{err}");
    }
    Ok(())
}

#[test]
fn guards_and_futures_are_send_and_static() {
    fn send_static<T: Send + 'static>(_: &T) {}
    fn send<T: Send>(_: &T) {}
    fn check(locker: sqlock::Locker) {
        send(&locker.try_acquire("k"));
        send(&locker.acquire("k"));
        send(&locker.acquire_timeout("k", Duration::from_secs(1)));
        send_static(&locker);
    }
    fn guard_is_send_static(g: sqlock::LockGuard) {
        send_static(&g);
        send(&g.release());
    }
    let _ = (check, guard_is_send_static);
}

#[tokio::test]
async fn list_shows_held_locks_only() -> anyhow::Result<()> {
    for b in common::backends("basic_list").await {
        let a = b.fresh_table().await?;
        let ttl = Duration::from_secs(600);
        let held = a.lock("held").ttl(ttl).try_acquire().await?.expect("held");
        let again = a
            .lock("held")
            .ttl(ttl)
            .try_acquire()
            .await?
            .expect("re-entry");
        let inserted = a
            .lock("inserted")
            .strategy(sqlock::Strategy::Insert)
            .ttl(ttl)
            .try_acquire()
            .await?
            .expect("inserted");
        assert!(
            a.try_acquire("released")
                .await?
                .expect("r")
                .release()
                .await?
        );
        let list = a.list().await?;
        let keys: Vec<_> = list.iter().map(|l| l.key.as_str()).collect();
        assert_eq!(keys, ["held", "inserted"], "{}", b.dialect);
        let h = &list[0];
        assert_eq!(h.strategy, "lease");
        assert_eq!(list[1].strategy, "insert");
        assert_eq!(h.owner, a.owner().to_string());
        assert_eq!(h.fencing_token, held.fencing_token());
        assert_eq!(h.hold_count, 2);
        assert!(h.acquired_at <= h.expires_at);
        assert!(
            h.expires_in <= ttl && h.expires_in > ttl - Duration::from_secs(120),
            "{:?}",
            h.expires_in
        );
        assert!(again.release().await? && held.release().await? && inserted.release().await?);
        assert!(a.list().await?.is_empty(), "{}", b.dialect);
    }
    Ok(())
}
