//! One handle acquiring a key it already holds: holds are counted, each needs a release.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::time::Duration;

#[tokio::test]
async fn reentrant_holds_are_counted_and_released_one_by_one() -> anyhow::Result<()> {
    for b in common::backends("reentrant").await {
        let a = b.fresh_table().await?;
        let other = b.locker().await?;
        let first = a.try_acquire("k").await?.expect("first hold");
        let second = a.try_acquire("k").await?.expect("reentrant hold");
        let third = a.clone().acquire("k").await?; // clones share the owner
        assert_eq!(
            (first.hold_count(), second.hold_count(), third.hold_count()),
            (1, 2, 3),
            "{}",
            b.dialect
        );
        assert_eq!(
            first.fencing_token(),
            second.fencing_token(),
            "a re-entry keeps the token"
        );
        assert_eq!(first.fencing_token(), third.fencing_token());

        assert!(third.release().await?);
        assert!(second.release().await?);
        assert!(
            other.try_acquire("k").await?.is_none(),
            "{}: one hold is left",
            b.dialect
        );
        let token = first.fencing_token();
        assert!(first.release().await?);
        let g = other
            .try_acquire("k")
            .await?
            .expect("free after the last release");
        assert!(g.fencing_token() > token, "{}", b.dialect);
        assert!(g.release().await?);
    }
    Ok(())
}

#[tokio::test]
async fn reentry_keeps_the_later_expiry() -> anyhow::Result<()> {
    for b in common::backends("reentrant_expiry").await {
        let a = b.fresh_table().await?;
        let long = a
            .lock("k")
            .ttl(Duration::from_secs(600))
            .try_acquire()
            .await?
            .expect("k");
        let short = a
            .lock("k")
            .ttl(Duration::from_secs(1))
            .try_acquire()
            .await?
            .expect("re-entry");
        assert!(short.expires_at() >= long.expires_at(), "{}", b.dialect);
        assert!(short.release().await? && long.release().await?);
    }
    Ok(())
}

#[tokio::test]
async fn new_handle_is_another_owner() -> anyhow::Result<()> {
    for b in common::backends("reentrant_new_handle").await {
        let a = b.fresh_table().await?;
        let sibling = a.new_handle();
        assert_ne!(a.owner(), sibling.owner());
        let g = a.try_acquire("k").await?.expect("k");
        assert!(sibling.try_acquire("k").await?.is_none(), "{}", b.dialect);
        assert!(g.release().await?);
    }
    Ok(())
}
