//! Random interleavings of acquisitions (of one or several permits), releases and
//! lapses of permits on one semaphore, from several handles, checked step by step
//! against a model that counts the permits: a grant exactly when enough are free, a
//! release that answers whether all its permits were still held and frees nobody
//! else's, the holders the database lists equal to the model's, and each slot's tokens
//! rising. On every backend: a SQLite file, PostgreSQL and MariaDB.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::collections::HashMap;

use proptest::prelude::*;
use sqlock::{Dialect, SemaphoreGuard};

/// N, and the handles that take permits.
const N: u32 = 3;
const HANDLES: usize = 3;

#[derive(Debug, Clone, Copy)]
enum Op {
    /// A handle tries to take this many permits at once.
    Acquire(usize, u32),
    /// A handle gives back one of its guards (the oldest, or the newest).
    Release(usize, bool),
    /// The permit in this slot lapses (its expiry moved into the past), as after a
    /// pause of its holder.
    Expire(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..HANDLES, 1..=N).prop_map(|(h, k)| Op::Acquire(h, k)),
        3 => (0..HANDLES, any::<bool>()).prop_map(|(h, o)| Op::Release(h, o)),
        1 => (0..N).prop_map(Op::Expire),
    ]
}

/// The slot number of a permit's key.
fn slot(key: &str) -> usize {
    key.rsplit('#')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(usize::MAX)
}

async fn check_interleaving(b: &common::Backend, name: &str, ops: &[Op]) -> anyhow::Result<()> {
    let first = b.builder().await?.auto_renew(false).build()?;
    let handles: Vec<_> = (0..HANDLES)
        .map(|i| {
            if i == 0 {
                first.clone()
            } else {
                first.new_handle()
            }
        })
        .collect();
    // Each handle's guards, with an id each; the model: which guard holds each slot
    // live, and each slot's last token.
    let mut guards: Vec<Vec<(usize, SemaphoreGuard)>> = (0..HANDLES).map(|_| Vec::new()).collect();
    let mut slots: Vec<Option<usize>> = vec![None; N as usize];
    let mut tokens: HashMap<usize, i64> = HashMap::new();
    let mut next_id = 0;
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Acquire(h, k) => {
                let free = slots.iter().filter(|s| s.is_none()).count();
                let got = handles[h].semaphore(name, N).try_acquire_many(k).await?;
                let expected = free >= k as usize;
                anyhow::ensure!(
                    got.is_some() == expected,
                    "step {step} {op:?}: granted {} with {free} free",
                    got.is_some()
                );
                if let Some(g) = got {
                    anyhow::ensure!(g.permits() == k, "step {step}: {} permits", g.permits());
                    for (key, token) in g.tokens() {
                        let s = slot(key);
                        anyhow::ensure!(s < N as usize, "step {step}: slot of {key}");
                        anyhow::ensure!(slots[s].is_none(), "step {step}: {key} was held");
                        anyhow::ensure!(
                            tokens.get(&s).is_none_or(|&t| token > t),
                            "step {step}: {key}'s token did not rise"
                        );
                        tokens.insert(s, token);
                        slots[s] = Some(next_id);
                    }
                    guards[h].push((next_id, g));
                    next_id += 1;
                }
            }
            Op::Release(h, oldest) => {
                if guards[h].is_empty() {
                    continue;
                }
                let (id, g) = if oldest {
                    guards[h].remove(0)
                } else {
                    guards[h].pop().unwrap()
                };
                let live = g.keys().all(|k| slots[slot(k)] == Some(id));
                let ok = g.release().await?;
                anyhow::ensure!(ok == live, "step {step} {op:?}: release said {ok}");
                for s in slots.iter_mut().filter(|s| **s == Some(id)) {
                    *s = None;
                }
            }
            Op::Expire(s) => {
                b.expire(first.pool(), &format!("semaphore:{name}#{s}"))
                    .await?;
                slots[s as usize] = None;
            }
        }
        let listed = handles[0].semaphore(name, N).holders().await?.len();
        let held = slots.iter().filter(|s| s.is_some()).count();
        anyhow::ensure!(
            listed == held,
            "step {step} {op:?}: {listed} listed, {held} held"
        );
    }
    for g in guards.into_iter().flatten() {
        g.1.release().await?;
    }
    Ok(())
}

#[test]
fn random_interleavings_match_a_model_of_n_permits() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let backends = rt.block_on(async {
        let all = common::backends("sem_model").await;
        for b in &all {
            let locker = b.locker().await.unwrap();
            let drop = match b.dialect {
                Dialect::MySql => format!("DROP TABLE IF EXISTS `{}_semaphores`", b.table),
                _ => format!("DROP TABLE IF EXISTS \"{}_semaphores\"", b.table),
            };
            b.script(locker.pool(), &drop).await.unwrap();
            b.fresh_table().await.unwrap();
        }
        all
    });
    let case = std::sync::atomic::AtomicU32::new(0);
    proptest!(ProptestConfig::with_cases(24), |(ops in proptest::collection::vec(op(), 1..30))| {
        let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        for b in &backends {
            let name = format!("case-{n}");
            let outcome = rt.block_on(check_interleaving(b, &name, &ops));
            prop_assert!(outcome.is_ok(), "{}: {:?}", b.dialect, outcome.err());
        }
    });
}
