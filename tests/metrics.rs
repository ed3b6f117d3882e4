//! The metrics (feature `metrics`), read back through the facade's in-memory recorder:
//! a grant, a busy answer, a timeout, a handoff, a loss and renewals move their
//! counters and histograms, the gauge of held locks follows the guards, and the key is
//! a label only when the handle asks for it. On every backend.
#![cfg(all(
    feature = "metrics",
    feature = "postgres",
    feature = "mysql",
    feature = "sqlite"
))]

mod common;

use std::time::Duration;

use sqlock::Error;

/// A deadline for conditions that take a moment, generous for a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

use common::recorded::{counter, gauge, samples, seen, series};

/// Waits until `ready` holds, within [`PATIENCE`].
async fn until(what: &str, ready: impl Fn() -> bool) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !ready() {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

#[tokio::test]
async fn a_grant_a_busy_answer_a_timeout_and_a_handoff_move_their_metrics() -> anyhow::Result<()> {
    for b in common::backends("metrics_moves").await {
        let d = b.dialect;
        let t = b.table.as_str();
        let a = b.fresh_table().await?;
        let other = b.locker().await?;
        let grants = series("sqlock_grants_total", t, &[]);
        let busy = series("sqlock_busy_total", t, &[]);
        let timeouts = series("sqlock_timeouts_total", t, &[]);
        let acquire = series("sqlock_acquire_seconds", t, &[]);
        let held_for = series("sqlock_held_seconds", t, &[]);
        let handoff = series("sqlock_handoff_seconds", t, &[]);
        let held = series("sqlock_locks_held", t, &[]);
        let statements = format!("sqlock_statements_total{{table={t}}}");

        // A grant.
        let (g0, a0, h0, s0) = (
            counter(&grants),
            samples(&acquire),
            gauge(&held),
            counter(&statements),
        );
        let guard = a.try_acquire("job").await?.expect("a free key is granted");
        assert_eq!(counter(&grants), g0 + 1, "{d}");
        assert_eq!(samples(&acquire), a0 + 1, "{d}");
        assert_eq!(gauge(&held), h0 + 1.0, "{d}: one more guard held");
        assert!(
            counter(&statements) > s0,
            "{d}: the acquisition's statement"
        );

        // A busy answer, and a timeout.
        let b0 = counter(&busy);
        assert!(other.try_acquire("job").await?.is_none(), "{d}");
        assert_eq!(counter(&busy), b0 + 1, "{d}");
        let o0 = counter(&timeouts);
        let waited = other
            .acquire_timeout("job", Duration::from_millis(50))
            .await;
        assert!(
            matches!(waited, Err(Error::Timeout { .. })),
            "{d}: {waited:?}"
        );
        assert_eq!(counter(&timeouts), o0 + 1, "{d}");

        // A handoff: a waiter found it busy, and gets it once it is released.
        let b1 = counter(&busy);
        let (f0, q0) = (samples(&held_for), samples(&handoff));
        let waiter = {
            let other = other.clone();
            tokio::spawn(async move { other.lock("job").timeout(PATIENCE).acquire().await })
        };
        until("the waiter found the lock busy", || counter(&busy) > b1).await?;
        assert!(guard.release().await?, "{d}");
        let next = waiter.await??;
        assert_eq!(
            samples(&held_for),
            f0 + 1,
            "{d}: the released guard's time held"
        );
        assert_eq!(samples(&handoff), q0 + 1, "{d}: the waiter's handoff");
        assert_eq!(
            gauge(&held),
            h0 + 1.0,
            "{d}: one guard released, one granted"
        );
        assert!(next.release().await?, "{d}");
        assert_eq!(gauge(&held), h0, "{d}: no guard held");
    }
    Ok(())
}

#[tokio::test]
async fn a_loss_and_renewals_move_their_counters() -> anyhow::Result<()> {
    for b in common::backends("metrics_loss").await {
        let d = b.dialect;
        let t = b.table.as_str();
        b.fresh_table().await?;
        // Renewals every 20 ms: a loss is found at the next tick.
        let a = b
            .builder()
            .await?
            .renew_interval(Duration::from_millis(20))
            .build()?;
        let operator = b.locker().await?;
        let losses = series("sqlock_losses_total", t, &[("reason", "not_held")]);
        let renewals = format!("sqlock_renewals_total{{table={t}}}");

        let r0 = counter(&renewals);
        let guard = a.acquire("lost-job").await?;
        until("a renewal", || counter(&renewals) > r0).await?;

        let l0 = counter(&losses);
        assert!(operator.force_release_now("lost-job").await?, "{d}");
        let reason = tokio::time::timeout(PATIENCE, guard.lost().wait()).await?;
        assert_eq!(reason, sqlock::LostReason::NotHeld, "{d}");
        assert_eq!(counter(&losses), l0 + 1, "{d}");
        assert!(!guard.release().await?, "{d}: lost");
    }
    Ok(())
}

#[tokio::test]
async fn the_key_is_a_label_only_when_asked_for() -> anyhow::Result<()> {
    for b in common::backends("metrics_key").await {
        let d = b.dialect;
        let t = b.table.as_str();
        b.fresh_table().await?;
        let plain = b.locker().await?;
        let keyed = b.builder().await?.metrics_key_label(true).build()?;
        assert!(plain.try_acquire("plain-key").await?.is_some(), "{d}");
        assert!(keyed.try_acquire("keyed-key").await?.is_some(), "{d}");
        let seen = seen();
        let of_table = |needle: &str| {
            seen.counters.keys().any(|k| {
                k.starts_with("sqlock_grants_total{")
                    && k.contains(&format!("table={t}"))
                    && k.contains(needle)
            })
        };
        assert!(of_table("key=keyed-key"), "{d}: the keyed handle's grant");
        assert!(!of_table("key=plain-key"), "{d}: a key label by default");
    }
    Ok(())
}

/// A multi-lock's attempt is one statement on every server, whatever the number of
/// keys: the grant of five free keys, and a busy answer when they are held.
#[tokio::test]
async fn a_multi_lock_attempt_is_one_statement() -> anyhow::Result<()> {
    for b in common::backends("metrics_multi").await {
        let d = b.dialect;
        let t = b.table.as_str();
        let a = b.fresh_table().await?;
        let other = b.locker().await?;
        let statements = format!("sqlock_statements_total{{table={t}}}");
        let keys = ["m1", "m2", "m3", "m4", "m5"];
        // A handle asks once, before its first acquisition, whether MariaDB is a
        // Galera node: asked here, so that the count below is the attempts' alone.
        for h in [&a, &other] {
            let g = h.try_acquire("warm-up").await?.expect("a free key");
            assert!(g.release().await?, "{d}");
        }
        let s0 = counter(&statements);
        let set = a
            .lock_many(&keys)
            .try_acquire()
            .await?
            .expect("free keys are granted");
        assert_eq!(counter(&statements), s0 + 1, "{d}: the grant of five keys");
        let s1 = counter(&statements);
        assert!(other.lock_many(&keys).try_acquire().await?.is_none(), "{d}");
        assert_eq!(counter(&statements), s1 + 1, "{d}: a busy answer");
        assert!(set.release().await?, "{d}");
    }
    Ok(())
}

/// A fair lock nobody waits for costs what a lease costs, on every server: one
/// statement to take it (waiting or not) and one to give it back. With a waiter queued,
/// the release goes through the queue (under the key's gate, handing the lock on), and
/// so does the waiter's own release, which finds the queue empty and clears its flag:
/// the next cycle is one statement each way again.
#[tokio::test]
async fn a_fair_lock_nobody_waits_for_is_one_statement_each_way() -> anyhow::Result<()> {
    for b in common::backends("metrics_fair").await {
        let d = b.dialect;
        let t = b.table.as_str();
        b.fresh_table().await?;
        // No renewal ticks during the count.
        let a = b
            .builder()
            .await?
            .strategy(sqlock::Strategy::Fair)
            .ttl(Duration::from_secs(600))
            .build()?;
        let other = a.new_handle();
        let statements = statements_of(t);
        for h in [&a, &other] {
            let g = h.try_acquire("warm-up").await?.expect("a free key");
            assert!(g.release().await?, "{d}");
        }
        let cost = |before: u64| counter(&statements) - before;
        let cycle = |what: &'static str| {
            let a = a.clone();
            async move {
                let s = counter(&statements_of(t));
                let g = a.try_acquire("fair").await?.expect("free");
                assert_eq!(
                    counter(&statements_of(t)) - s,
                    1,
                    "{d}: {what}: a try's grant"
                );
                let s = counter(&statements_of(t));
                assert!(g.release().await?);
                assert_eq!(
                    counter(&statements_of(t)) - s,
                    1,
                    "{d}: {what}: its release"
                );
                let s = counter(&statements_of(t));
                let g = a.acquire("fair").await?;
                assert_eq!(
                    counter(&statements_of(t)) - s,
                    1,
                    "{d}: {what}: a wait's grant"
                );
                Ok::<_, anyhow::Error>(g)
            }
        };
        let held = cycle("nobody queued").await?;
        let waiting = tokio::spawn(async move { other.acquire("fair").await });
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while common::fair::queued(&b, &a, "fair").await? == 0 {
            anyhow::ensure!(tokio::time::Instant::now() < deadline, "{d}: never queued");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let s = counter(&statements);
        assert!(held.release().await?);
        assert!(
            cost(s) > 1,
            "{d}: a release with a waiter queued hands it on"
        );
        let handed = tokio::time::timeout(PATIENCE, waiting).await???;
        assert!(handed.release().await?, "{d}");
        let again = cycle("after the queue emptied").await?;
        assert!(again.release().await?, "{d}");
    }
    Ok(())
}

/// The series name of the statements sent on table `t`.
fn statements_of(t: &str) -> String {
    format!("sqlock_statements_total{{table={t}}}")
}

/// What a read-write lock's steps cost, in statements, on every server (its reads hold
/// the name in shared mode): a read's grant is three (the key's gate, the read, the
/// name's mark), a read's last release two (the read, the name's count); the write
/// side's grant and its release without a read of its handle one each, as any lease;
/// a downgrade's read three, and the write's release beside it two (the write, the
/// name left to the read).
#[tokio::test]
async fn a_read_write_locks_steps_cost_what_they_say() -> anyhow::Result<()> {
    for b in common::backends("metrics_rw").await {
        let d = b.dialect;
        let t = b.table.as_str();
        b.fresh_table().await?;
        // No renewal ticks during the count.
        let a = b.builder().await?.ttl(Duration::from_secs(600)).build()?;
        let other = a.new_handle();
        let statements = format!("sqlock_statements_total{{table={t}}}");
        for h in [&a, &other] {
            let g = h.try_acquire("warm-up").await?.expect("a free key");
            assert!(g.release().await?, "{d}");
        }
        let cost = |before: u64| counter(&statements) - before;
        let s = counter(&statements);
        let r1 = a.read_lock("rw").try_acquire().await?.expect("free");
        assert_eq!(cost(s), 3, "{d}: a read's grant");
        let s = counter(&statements);
        let r2 = other.read_lock("rw").try_acquire().await?.expect("shared");
        assert_eq!(cost(s), 3, "{d}: a second read's grant");
        let s = counter(&statements);
        assert!(r2.release().await?);
        assert_eq!(cost(s), 2, "{d}: a read's release");
        assert!(r1.release().await?);
        let s = counter(&statements);
        let w = a.write_lock("rw").try_acquire().await?.expect("free");
        assert_eq!(cost(s), 1, "{d}: the write side's grant");
        let s = counter(&statements);
        assert!(w.release().await?);
        assert_eq!(cost(s), 1, "{d}: the write side's release");
        let w = a.write_lock("rw").try_acquire().await?.expect("free");
        let s = counter(&statements);
        let r = a.read_lock("rw").try_acquire().await?.expect("a downgrade");
        assert_eq!(cost(s), 3, "{d}: a downgrade's read");
        let s = counter(&statements);
        assert!(w.release().await?);
        // One statement too: it leaves the name to the read.
        assert_eq!(cost(s), 1, "{d}: the write's release beside its read");
        assert!(r.release().await?);
        assert_eq!(b.held_rows(a.pool()).await?, 0, "{d}");
    }
    Ok(())
}
