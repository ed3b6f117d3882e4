//! Expired leases: takeover, owner-checked release after takeover, rising tokens.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::time::Duration;

#[tokio::test]
async fn expired_lease_is_taken_over_with_a_higher_token() -> anyhow::Result<()> {
    for b in common::backends("expiry_takeover").await {
        let a = b.fresh_table().await?;
        let other = b.locker().await?;
        let mut old = a.try_acquire("k").await?.expect("k");
        assert!(other.try_acquire("k").await?.is_none());

        b.expire(a.pool(), "k").await?;
        let new = other
            .try_acquire("k")
            .await?
            .expect("an expired lease is free");
        assert!(new.fencing_token() > old.fencing_token(), "{}", b.dialect);
        assert_eq!(new.hold_count(), 1);

        // The old holder changes nothing and is told so.
        assert!(!old.extend(Duration::from_secs(60)).await?, "{}", b.dialect);
        assert!(!old.release().await?, "{}", b.dialect);
        assert!(
            a.try_acquire("k").await?.is_none(),
            "{}: the new holder keeps it",
            b.dialect
        );
        assert!(new.release().await?, "{}", b.dialect);
    }
    Ok(())
}

#[tokio::test]
async fn real_ttl_lapses_on_the_database_clock() -> anyhow::Result<()> {
    for b in common::backends("expiry_real").await {
        let a = b.fresh_table().await?;
        let other = b.locker().await?;
        let g = a
            .lock("k")
            .ttl(Duration::from_millis(200))
            .auto_renew(false)
            .try_acquire()
            .await?
            .expect("k");
        // Waits until the database says the lease is over, however long that takes.
        let taken = other.acquire_timeout("k", Duration::from_secs(20)).await?;
        assert!(taken.fencing_token() > g.fencing_token());
        assert!(!g.release().await?, "{}", b.dialect);
        assert!(taken.release().await?);
    }
    Ok(())
}

#[tokio::test]
async fn own_expired_lease_is_a_new_grant_not_a_reentry() -> anyhow::Result<()> {
    for b in common::backends("expiry_own").await {
        let a = b.fresh_table().await?;
        let old = a.try_acquire("k").await?.expect("k");
        b.expire(a.pool(), "k").await?;
        let again = a.try_acquire("k").await?.expect("k again");
        assert_eq!(
            again.hold_count(),
            1,
            "{}: the lapsed hold is not counted",
            b.dialect
        );
        assert!(again.fencing_token() > old.fencing_token());
        assert!(
            !old.release().await?,
            "{}: the lapsed grant is gone",
            b.dialect
        );
        assert!(again.release().await?);
    }
    Ok(())
}

#[tokio::test]
async fn tokens_keep_rising_after_the_row_was_deleted() -> anyhow::Result<()> {
    for b in common::backends("expiry_deleted").await {
        let a = b.fresh_table().await?;
        let mut last = 0;
        for round in 0..3 {
            let g = a.try_acquire("k").await?.expect("k");
            assert!(g.fencing_token() > last, "{} round {round}", b.dialect);
            last = g.fencing_token();
            // Another key's grants must not matter, and neither may the deletion.
            let other = a.try_acquire("other").await?.expect("other");
            assert!(other.release().await?);
            assert!(g.release().await?);
            b.delete_row(a.pool(), "k").await?;
        }
    }
    Ok(())
}
