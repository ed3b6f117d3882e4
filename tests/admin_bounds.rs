//! Admin operations never wait on a held row lock: with a for-update lock held, a
//! sweep reclaims every released and expired row of the other strategies and leaves
//! the for-update row, the list leaves the for-update key out, and a force release of
//! the for-update key answers `Error::RowLocked` within its documented two seconds of
//! tries, without taking it from its holder.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::time::{Duration, Instant};

use sqlock::{Error, Strategy, SweepOptions};
use tokio::time::timeout;

/// A liveness bound only: each call answers in milliseconds when it does not wait.
const GUARD: Duration = Duration::from_secs(10);

/// The documented bound of a force release that meets a for-update holder: "about two
/// seconds of tries". Its 40 retries sleep at most 1 + 2 + 4 + 8 + 16 + 32 ms and then
/// 34 times 64 ms (the back-off's cap): 2.24 s. Its 41 statements never wait on the
/// row lock; three seconds for them on a busy machine (a force release that waited on
/// the row lock would wait as long as the for-update holder holds it: the whole test).
const FORCE_RELEASE_BOUND: Duration = Duration::from_millis(2_240 + 3_000);

const RELEASED: [&str; 3] = ["released-1", "released-2", "released-3"];
const EXPIRED: [&str; 2] = ["expired-lease", "expired-insert"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_operations_pass_a_held_row_lock() -> anyhow::Result<()> {
    let mut problems = Vec::new();
    for b in common::servers("admin_bounds").await {
        let d = b.dialect;
        b.fresh_table().await?;
        let setup = b.locker().await?;
        for key in RELEASED {
            let g = setup.try_acquire(key).await?.expect("free");
            assert!(g.release().await?);
        }
        let mut expired = Vec::new();
        for (key, strategy) in EXPIRED.into_iter().zip([Strategy::Lease, Strategy::Insert]) {
            let g = setup
                .lock(key)
                .strategy(strategy)
                .auto_renew(false)
                .try_acquire()
                .await?
                .expect("free");
            b.expire(setup.pool(), key).await?;
            expired.push(g);
        }
        let live = setup.try_acquire("live").await?.expect("free");
        let holder = b.builder().await?.strategy(Strategy::ForUpdate).build()?;
        let held = holder.try_acquire("held").await?.expect("free");

        let admin = b.locker().await?;
        let t = b.quoted();
        let reclaimable = (RELEASED.len() + EXPIRED.len()) as u64;
        match timeout(GUARD, admin.sweep(SweepOptions::new())).await {
            Ok(Ok(n)) if n == reclaimable => {}
            r => problems.push(format!(
                "{d}: sweep: expected Ok({reclaimable}) (the released and expired rows), got {r:?}"
            )),
        }
        let left = b
            .scalar(
                admin.pool(),
                &format!("SELECT COUNT(*) FROM {t} WHERE lock_key IN ('released-1', 'released-2', 'released-3', 'expired-lease', 'expired-insert')"),
            )
            .await?;
        if left != 0 {
            problems.push(format!(
                "{d}: {left} released or expired rows left after the sweep"
            ));
        }
        let kept = b
            .scalar(
                admin.pool(),
                &format!("SELECT COUNT(*) FROM {t} WHERE lock_key IN ('held', 'live')"),
            )
            .await?;
        if kept != 2 {
            problems.push(format!(
                "{d}: the sweep took the for-update row or the live lease ({kept} of 2 left)"
            ));
        }

        match timeout(GUARD, admin.list()).await {
            Ok(Ok(listed)) => {
                let keys: Vec<&str> = listed.iter().map(|l| l.key.as_str()).collect();
                if keys != ["live"] {
                    problems.push(format!("{d}: list: expected only \"live\", got {keys:?}"));
                }
            }
            r => problems.push(format!("{d}: list: {r:?}")),
        }

        let started = Instant::now();
        match timeout(GUARD, admin.force_release("held")).await {
            Ok(Err(Error::RowLocked { key })) if key == "held" => {
                let took = started.elapsed();
                println!("{d}: force_release of a for-update key: RowLocked after {took:?}");
                if took > FORCE_RELEASE_BOUND {
                    problems.push(format!(
                        "{d}: force_release of the for-update key answered after {took:?}, \
                         over the documented bound of about two seconds ({FORCE_RELEASE_BOUND:?})"
                    ));
                }
            }
            Ok(r) => problems.push(format!(
                "{d}: force_release of the for-update key: expected Err(RowLocked), got {r:?}"
            )),
            Err(_) => problems.push(format!(
                "{d}: force_release of the for-update key did not return within {GUARD:?}"
            )),
        }

        if held.is_lost() {
            problems.push(format!(
                "{d}: the for-update holder was lost: {:?}",
                held.lost().reason()
            ));
        }
        match timeout(GUARD, held.release()).await {
            Ok(Ok(true)) => {}
            r => problems.push(format!(
                "{d}: the for-update holder's release: expected Ok(true), got {r:?}"
            )),
        }
        assert!(live.release().await?, "{d}: the live lease");
        for g in expired {
            g.release().await?;
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    Ok(())
}

/// The point lookup answers for one key what the list says of it: nothing when it is
/// free or held by a for-update lock (which lives in its holder's transaction), the
/// holder's owner and token while a lease holds it; and it never waits on a held row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_info_answers_for_one_key() -> anyhow::Result<()> {
    for b in common::backends("admin_lookup").await {
        let d = b.dialect;
        let admin = b.fresh_table().await?;
        let holder = b.locker().await?;
        assert!(admin.lock_info("k").await?.is_none(), "{d}: free");
        let g = holder.try_acquire("k").await?.expect("free");
        let info = admin.lock_info("k").await?.expect("held");
        assert_eq!(info.key, "k", "{d}");
        assert_eq!(info.owner, holder.owner().to_string(), "{d}");
        assert_eq!(info.fencing_token, g.fencing_token(), "{d}");
        assert_eq!(info.strategy, "lease", "{d}");
        assert!(info.expires_in > Duration::ZERO, "{d}");
        let listed = admin.list().await?;
        assert_eq!(listed.len(), 1, "{d}");
        assert_eq!(
            (
                &listed[0].owner,
                listed[0].fencing_token,
                listed[0].expires_at
            ),
            (&info.owner, info.fencing_token, info.expires_at),
            "{d}: the list says the same"
        );
        assert!(g.release().await?);
        assert!(admin.lock_info("k").await?.is_none(), "{d}: released");
        assert!(matches!(
            admin.lock_info("").await,
            Err(sqlock::Error::EmptyKey)
        ));
        if d != sqlock::Dialect::Sqlite {
            let fu = holder
                .lock("f")
                .strategy(Strategy::ForUpdate)
                .try_acquire()
                .await?
                .expect("free");
            let seen = timeout(GUARD, admin.lock_info("f")).await??;
            assert!(seen.is_none(), "{d}: a for-update lock is not seen");
            assert!(fu.release().await?);
        }
    }
    Ok(())
}
