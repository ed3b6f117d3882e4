//! Property test: random interleavings of read and write acquisitions, releases and
//! expiries from several handles on one read-write lock match a model in which there
//! are many readers or one writer, on every backend. Reads hold the name itself in
//! shared mode: a read that lapses while others hold keeps the name counted, and so
//! held, until the name expires.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use proptest::prelude::*;
use sqlock::LockGuard;

#[derive(Debug, Clone, Copy)]
enum Op {
    Read(usize),
    Write(usize),
    Release(usize),
    /// The handle's hold lapses (its expiry moved into the past), as after a pause;
    /// with no hold of its own, the name does, when no hold keeps it.
    Expire(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3usize).prop_map(Op::Read),
        3 => (0..3usize).prop_map(Op::Write),
        3 => (0..3usize).prop_map(Op::Release),
        1 => (0..3usize).prop_map(Op::Expire),
    ]
}

/// What the model knows of a handle's hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    Read,
    Write,
}

/// Runs `ops` on the lock `name` of one backend and checks every answer against the
/// model: a read is granted exactly when no other handle holds the write side, a write
/// exactly when no other handle holds either side and the name is not held by a read
/// that lapsed while others held (a write tried once records no intent), a release
/// succeeds exactly for a hold that did not lapse, write tokens rise.
///
/// A read's lapse moves its row's expiry into the past; when no other read is live,
/// the name's too, which the read's grant and renewals kept no shorter (time passing
/// to the read's expiry passes the name's). With another read live, the name stays
/// held and counts the lapsed read until it expires (an `Expire` of a handle with no
/// live hold, once no read is live).
async fn check(b: &common::Backend, name: &str, ops: &[Op]) -> anyhow::Result<()> {
    let first = b.builder().await?.auto_renew(false).build()?;
    let handles = [first.clone(), first.new_handle(), first.new_handle()];
    let mut guards: [Option<(Held, LockGuard)>; 3] = [None, None, None];
    // The live holds, by handle.
    let mut live: [Option<Held>; 3] = [None; 3];
    // Whether the name is held, counting a read that lapsed while others held it.
    let mut lingers = false;
    let mut last_write = 0;
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Read(h) | Op::Write(h) if guards[h].is_some() => {}
            Op::Read(h) => {
                let got = handles[h].read_lock(name).try_acquire().await?;
                let expected = live
                    .iter()
                    .enumerate()
                    .all(|(i, l)| i == h || *l != Some(Held::Write));
                anyhow::ensure!(
                    got.is_some() == expected,
                    "step {step} {op:?}: read granted {} with {live:?}",
                    got.is_some()
                );
                if let Some(g) = got {
                    live[h] = Some(Held::Read);
                    guards[h] = Some((Held::Read, g));
                }
            }
            Op::Write(h) => {
                let got = handles[h].write_lock(name).try_acquire().await?;
                let expected =
                    !lingers && live.iter().enumerate().all(|(i, l)| i == h || l.is_none());
                anyhow::ensure!(
                    got.is_some() == expected,
                    "step {step} {op:?}: write granted {} with {live:?}",
                    got.is_some()
                );
                if let Some(g) = got {
                    anyhow::ensure!(
                        g.fencing_token() > last_write,
                        "step {step}: write token did not rise"
                    );
                    last_write = g.fencing_token();
                    live[h] = Some(Held::Write);
                    guards[h] = Some((Held::Write, g));
                }
            }
            Op::Release(h) => {
                if let Some((_, g)) = guards[h].take() {
                    let ok = g.release().await?;
                    anyhow::ensure!(
                        ok == live[h].is_some(),
                        "step {step} {op:?}: release said {ok} with {live:?}"
                    );
                    live[h] = None;
                }
            }
            Op::Expire(h) => {
                let reads = |live: &[Option<Held>; 3]| {
                    live.iter().filter(|l| **l == Some(Held::Read)).count()
                };
                match &guards[h] {
                    Some((held, g)) if live[h].is_some() => {
                        // A read's own row, or the name's for the write side.
                        let row = if *held == Held::Read {
                            format!("{}@read:{}", g.key(), g.owner())
                        } else {
                            g.key().to_owned()
                        };
                        b.expire(first.pool(), &row).await?;
                        live[h] = None;
                        if *held == Held::Read {
                            if reads(&live) == 0 {
                                b.expire(first.pool(), name).await?;
                                lingers = false;
                            } else {
                                lingers = true;
                            }
                        }
                    }
                    _ if lingers && reads(&live) == 0 => {
                        b.expire(first.pool(), name).await?;
                        lingers = false;
                    }
                    _ => {}
                }
            }
        }
    }
    for (_, g) in guards.into_iter().flatten() {
        g.release().await?;
    }
    Ok(())
}

#[test]
fn random_interleavings_match_the_model() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let backends = rt.block_on(async {
        let all = common::backends("prop_rwlock").await;
        for b in &all {
            b.fresh_table().await.unwrap();
        }
        all
    });
    let case = std::sync::atomic::AtomicU32::new(0);
    proptest!(ProptestConfig::with_cases(24), |(ops in proptest::collection::vec(op(), 1..30))| {
        let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        for b in &backends {
            let name = format!("case-{n}");
            let outcome = rt.block_on(check(b, &name, &ops));
            prop_assert!(outcome.is_ok(), "{}: {:?}", b.dialect, outcome.err());
        }
    });
}
