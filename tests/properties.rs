//! Property tests: arbitrary input gets a typed error and never a panic, and random
//! interleavings of acquire, extend, release and expiry from several handles on one
//! key match a model in which at most one handle holds the lock.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::time::Duration;

use proptest::prelude::*;
use sqlock::{Error, LockGuard, Locker, TableName};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_table_name_is_accepted_or_refused_with_a_reason(name in "\\PC{0,60}") {
        match TableName::new(&name) {
            Ok(t) => {
                prop_assert!(!name.is_empty() && name.len() <= 40);
                prop_assert!(name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'));
                prop_assert_eq!(t.as_str(), name.as_str());
            }
            Err(Error::InvalidTableName { name: n, reason }) => {
                prop_assert_eq!(n, name);
                prop_assert!(!reason.is_empty());
            }
            Err(other) => prop_assert!(false, "unexpected error {other:?}"),
        }
    }
}

/// Keys of any Unicode, around the 255-byte limit, and TTLs of any size, through the
/// real API on a closed pool: each is refused with its own error before any SQL, or
/// passes validation and fails only for the closed pool.
#[test]
fn any_key_and_ttl_gets_a_typed_answer() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let locker = rt.block_on(async {
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .connect("sqlite::memory:")
            .await
            .unwrap();
        pool.close().await;
        Locker::new(pool).unwrap()
    });
    let strategy = (
        prop_oneof![
            "\\PC{0,300}",
            proptest::collection::vec(any::<char>(), 60..70)
                .prop_map(|c| c.into_iter().collect::<String>()),
            (250usize..260).prop_map(|n| "k".repeat(n)),
        ],
        any::<u64>(),
        any::<u32>(),
    );
    proptest!(ProptestConfig::with_cases(1024), |((key, secs, nanos) in strategy)| {
        let ttl = Duration::new(secs, nanos % 1_000_000_000);
        let result = rt.block_on(locker.lock(&key).ttl(ttl).try_acquire());
        let e = result.expect_err("the pool is closed");
        match e {
            Error::EmptyKey => prop_assert!(key.is_empty()),
            Error::KeyTooLong { len, max } => prop_assert!(len == key.len() && len > max),
            Error::KeyContainsNul => prop_assert!(key.contains('\0')),
            Error::TtlTooShort { .. } => prop_assert!(ttl < sqlock::MIN_TTL),
            Error::TtlTooLong { .. } => prop_assert!(ttl > sqlock::MAX_TTL),
            // Valid input: only the closed pool stopped it.
            Error::Database(_) => prop_assert!(
                !key.is_empty() && key.len() <= 255 && !key.contains('\0')
                    && ttl >= sqlock::MIN_TTL && ttl <= sqlock::MAX_TTL
            ),
            other => prop_assert!(false, "unexpected error {other:?}"),
        }
    });
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Acquire(usize),
    Extend(usize),
    Release(usize),
    /// The lease lapses (its expiry moved into the past), as after a pause.
    Expire,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3usize).prop_map(Op::Acquire),
        2 => (0..3usize).prop_map(Op::Extend),
        3 => (0..3usize).prop_map(Op::Release),
        1 => Just(Op::Expire),
    ]
}

/// Runs `ops` against one backend and checks every answer against the model: the
/// lock has at most one holder; a grant goes only to a handle when nobody else holds
/// it; extend and release succeed exactly for the holder; tokens rise with each grant.
async fn check_interleaving(b: &common::Backend, key: &str, ops: &[Op]) -> anyhow::Result<()> {
    let first = b.builder().await?.auto_renew(false).build()?;
    let handles = [first.clone(), first.new_handle(), first.new_handle()];
    let mut guards: [Option<LockGuard>; 3] = [None, None, None];
    let mut holder: Option<usize> = None;
    let mut last_token = 0;
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Acquire(h) => {
                if guards[h].is_some() {
                    continue; // one guard per handle keeps the model simple
                }
                let got = handles[h].try_acquire(key).await?;
                let expected = holder.is_none();
                anyhow::ensure!(
                    got.is_some() == expected,
                    "step {step} {op:?}: granted {} with holder {holder:?}",
                    got.is_some()
                );
                if let Some(g) = got {
                    anyhow::ensure!(
                        g.fencing_token() > last_token,
                        "step {step}: token did not rise"
                    );
                    last_token = g.fencing_token();
                    holder = Some(h);
                    guards[h] = Some(g);
                }
            }
            Op::Extend(h) => {
                if let Some(g) = guards[h].as_mut() {
                    let ok = g.extend(Duration::from_secs(600)).await?;
                    anyhow::ensure!(
                        ok == (holder == Some(h)),
                        "step {step} {op:?}: extend said {ok}"
                    );
                }
            }
            Op::Release(h) => {
                if let Some(g) = guards[h].take() {
                    let ok = g.release().await?;
                    anyhow::ensure!(
                        ok == (holder == Some(h)),
                        "step {step} {op:?}: release said {ok}"
                    );
                    if holder == Some(h) {
                        holder = None;
                    }
                }
            }
            Op::Expire => {
                b.expire(first.pool(), key).await?;
                holder = None;
            }
        }
    }
    for g in guards.into_iter().flatten() {
        g.release().await?;
    }
    Ok(())
}

#[test]
fn random_interleavings_never_yield_two_holders() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let backends = rt.block_on(async {
        let all = common::backends("prop_interleave").await;
        for b in &all {
            b.fresh_table().await.unwrap();
        }
        all
    });
    let case = std::sync::atomic::AtomicU32::new(0);
    proptest!(ProptestConfig::with_cases(48), |(ops in proptest::collection::vec(op(), 1..40))| {
        let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        for b in &backends {
            let key = format!("case-{n}");
            let outcome = rt.block_on(check_interleaving(b, &key, &ops));
            prop_assert!(outcome.is_ok(), "{}: {:?}", b.dialect, outcome.err());
        }
    });
}
