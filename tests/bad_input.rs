//! Every bad input gets its own error before any SQL is sent.
//!
//! The pools here are closed: a call that reached the database would fail with a
//! pool error, so getting the input error proves nothing was sent.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::time::Duration;

use sqlock::{Error, Locker};

/// A key, a TTL, and the error they must give.
type Case<'a> = (&'a str, Option<Duration>, fn(&Error) -> bool);

#[tokio::test]
async fn bad_keys_and_ttls_fail_before_any_sql() -> anyhow::Result<()> {
    for b in common::backends("bad_input").await {
        let pool = b.pool().await?;
        let locker = Locker::builder(pool.clone()).table(&b.table).build()?;
        pool.close().await;

        let long = "x".repeat(256);
        let cases: Vec<Case> = vec![
            ("", None, |e| matches!(e, Error::EmptyKey)),
            (&long, None, |e| {
                matches!(e, Error::KeyTooLong { len: 256, max: 255 })
            }),
            ("a\0b", None, |e| matches!(e, Error::KeyContainsNul)),
            ("k", Some(Duration::ZERO), |e| {
                matches!(e, Error::TtlTooShort { .. })
            }),
            ("k", Some(Duration::from_nanos(1)), |e| {
                matches!(e, Error::TtlTooShort { .. })
            }),
            ("k", Some(Duration::MAX), |e| {
                matches!(e, Error::TtlTooLong { .. })
            }),
        ];
        for (key, ttl, expected) in cases {
            fn request<'a>(
                l: &'a Locker,
                key: &'a str,
                ttl: Option<Duration>,
            ) -> sqlock::LockRequest<'a> {
                let r = l.lock(key);
                match ttl {
                    Some(t) => r.ttl(t),
                    None => r,
                }
            }
            let e = request(&locker, key, ttl)
                .try_acquire()
                .await
                .expect_err("bad input");
            assert!(
                expected(&e),
                "{}: try_acquire({key:?}, {ttl:?}): {e:?}",
                b.dialect
            );
            let e = request(&locker, key, ttl)
                .acquire()
                .await
                .expect_err("bad input");
            assert!(expected(&e), "{}: acquire: {e:?}", b.dialect);
            let e = request(&locker, key, ttl)
                .acquire_timeout(Duration::from_secs(1))
                .await
                .expect_err("bad input");
            assert!(expected(&e), "{}: acquire_timeout: {e:?}", b.dialect);
            assert!(!e.to_string().is_empty());
        }
        // A 255-byte key of multi-byte characters is fine; 256 bytes are not.
        let e = locker
            .try_acquire(&"é".repeat(128))
            .await
            .expect_err("256 bytes");
        assert!(matches!(e, Error::KeyTooLong { len: 256, .. }), "{e:?}");
    }
    Ok(())
}

#[tokio::test]
async fn bad_builder_settings_fail_at_build() -> anyhow::Result<()> {
    for b in common::backends("bad_builder").await {
        let pool = b.pool().await?;
        pool.close().await;
        for name in [
            "",
            "Locks",
            "locks; DROP TABLE x",
            "a.b",
            "\"q\"",
            "ünï",
            &"t".repeat(41),
        ] {
            let e = Locker::builder(pool.clone())
                .table(name)
                .build()
                .expect_err(name);
            assert!(
                matches!(e, Error::InvalidTableName { .. }),
                "{name:?}: {e:?}"
            );
        }
        for ttl in [Duration::ZERO, Duration::MAX] {
            let e = Locker::builder(pool.clone())
                .ttl(ttl)
                .build()
                .expect_err("ttl");
            assert!(
                matches!(e, Error::TtlTooShort { .. } | Error::TtlTooLong { .. }),
                "{e:?}"
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn guard_extend_checks_its_ttl_first() -> anyhow::Result<()> {
    for b in common::backends("bad_extend").await {
        let a = b.fresh_table().await?;
        let mut g = a.try_acquire("k").await?.expect("k");
        let e = g.extend(Duration::ZERO).await.expect_err("zero ttl");
        assert!(matches!(e, Error::TtlTooShort { .. }), "{e:?}");
        assert!(
            g.release().await?,
            "{}: a rejected extend changes nothing",
            b.dialect
        );
    }
    Ok(())
}
