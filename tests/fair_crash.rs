//! A fair handoff survives a crash of the server: the grant a release hands to the
//! next waiter, and the grant a leaving waiter passes on, are durable the moment the
//! handoff is acknowledged, on PostgreSQL with and without release wake-ups (whose
//! release statements skip the flush of a release that grants nobody).
//!
//! The crash is real: the fault instance (`scripts/fault-db.sh`, port 5433) is stopped
//! with `-m immediate`, which flushes nothing, and started again. To make whatever was
//! not flushed certain to be lost, the WAL writer is paused (SIGSTOP) before the
//! handoffs: an asynchronous commit otherwise wakes a WAL writer that sleeps and has
//! it written to the kernel at once, where an immediate stop does not lose it. That the
//! crash lost what was not flushed is checked each time: a lease release done after
//! the handoffs (a relaxed commit) must be gone after the restart; if it survived (a
//! checkpoint, say, flushed it), the round is run again. Run under
//! `flock /tmp/sqlock-fault.lock`, as every test that stops a fault server.

#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::time::Duration;

use anyhow::Context;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use sqlock::{Dialect, Locker, Strategy};
use tokio::time::timeout;

/// A fair waiter's polls: far enough apart that a waiter does not look between the
/// handoff and the restart (its first look comes 30 s to 60 s after it joins; the
/// handoffs, the crash and the restart take about 10 s), so that nothing of its own
/// flushes the WAL before the crash, and no look of its own meets the server down.
const QUIET_POLL: Duration = Duration::from_secs(60);

/// How many rounds may find that the crash lost nothing, before the test fails.
const ROUNDS: usize = 3;

/// The fault instance's script.
const SCRIPT: &str = common::FAULT_DB_SCRIPT;

async fn fault_db(action: &str) -> anyhow::Result<()> {
    common::fault_db("postgres", action).await
}

/// Puts the fault server back as it was, however the test ends: its WAL writer running
/// (a paused one is continued) and the server started.
struct Restore {
    walwriter: Option<Pid>,
}

impl Drop for Restore {
    fn drop(&mut self) {
        if let Some(pid) = self.walwriter.take() {
            let _ = kill(pid, Signal::SIGCONT);
        }
        let _ = std::process::Command::new("bash")
            .args([SCRIPT, "postgres", "start"])
            .status();
    }
}

/// A fair handle on `b` that only looks every [`QUIET_POLL`] (a place is renewed three
/// times per TTL: the TTL leaves the poll interval as it is).
async fn quiet_waiter(b: &common::Backend) -> anyhow::Result<Locker> {
    Ok(b.builder()
        .await?
        .strategy(Strategy::Fair)
        .ttl(QUIET_POLL * 5)
        .poll_interval(QUIET_POLL, QUIET_POLL)
        .build()?)
}

/// The owner and token of the live holder of `key`, read from the table.
async fn holder_of(l: &Locker, key: &str) -> anyhow::Result<(String, i64)> {
    let info = l
        .lock_info(key)
        .await?
        .with_context(|| format!("{key} held"))?;
    Ok((info.owner, info.fencing_token))
}

/// The owner of the place [`round`] writes into the queue by hand: a waiter that never
/// looks, so that nothing of its own flushes the WAL (a waiter behind the first looks
/// about once a second).
const STILL: &str = "00000000-0000-4000-8000-00000000c0de";

/// One side of a round: the handles and waits of one setting of release wake-ups, on
/// keys of its own (`release-<n>`, `leave-<n>`, `probe-<n>`).
struct Side {
    notify: bool,
    keys: [String; 3],
    holder: Locker,
    probe: Locker,
    probe_guard: Option<sqlock::LockGuard>,
    released: Option<sqlock::LockGuard>,
    left: Option<sqlock::LockGuard>,
    handed_owner: String,
    handed_wait: tokio::task::JoinHandle<sqlock::Result<sqlock::LockGuard>>,
    leaving_wait: tokio::task::JoinHandle<sqlock::Result<sqlock::LockGuard>>,
    /// The tokens of the two handoffs, once made.
    tokens: (i64, i64),
}

impl Side {
    /// The holder of `release-<n>` and `leave-<n>`, a quiet waiter behind each, and a
    /// still place behind the second; the probe held.
    async fn set_up(b: &common::Backend, base: &Locker, notify: bool) -> anyhow::Result<Self> {
        let n = u8::from(notify);
        let keys = [
            format!("release-{n}"),
            format!("leave-{n}"),
            format!("probe-{n}"),
        ];
        let holder = b
            .builder()
            .await?
            .strategy(Strategy::Fair)
            .notify_waiters(notify)
            .auto_renew(false)
            .ttl(Duration::from_secs(120))
            .build()?;
        // The probe: a lease whose release skips the flush, released after the handoffs.
        let probe = b
            .builder()
            .await?
            .notify_waiters(notify)
            .auto_renew(false)
            .ttl(Duration::from_secs(120))
            .build()?;
        let probe_guard = probe.acquire(&keys[2]).await?;

        // A release's handoff: `handed` waits behind the holder of `release-<n>`.
        let released = holder.acquire(&keys[0]).await?;
        let handed = quiet_waiter(b).await?;
        let handed_owner = handed.owner().to_string();
        let handed_wait = tokio::spawn({
            let (handed, key) = (handed.clone(), keys[0].clone());
            async move { handed.acquire(&key).await }
        });
        common::fair::until(|| async { Ok(common::fair::queued(b, base, &keys[0]).await? == 1) })
            .await?;

        // A leaving waiter's handoff: `leaving` and then a still place wait behind the
        // holder of `leave-<n>`; the lock is handed to `leaving`, which stops waiting
        // and passes it on.
        let left = holder.acquire(&keys[1]).await?;
        let leaving = quiet_waiter(b).await?;
        let leaving_wait = tokio::spawn({
            let (leaving, key) = (leaving.clone(), keys[1].clone());
            async move { leaving.acquire(&key).await }
        });
        common::fair::until(|| async { Ok(common::fair::queued(b, base, &keys[1]).await? == 1) })
            .await?;
        b.script(
            base.pool(),
            &format!(
                "INSERT INTO \"{}_queue\" (lock_key, lock_owner, expires_at) \
                 VALUES ('{}', '{STILL}', statement_timestamp() + INTERVAL '600 seconds')",
                b.table, keys[1]
            ),
        )
        .await?;
        Ok(Self {
            notify,
            keys,
            holder,
            probe,
            probe_guard: Some(probe_guard),
            released: Some(released),
            left: Some(left),
            handed_owner,
            handed_wait,
            leaving_wait,
            tokens: (0, 0),
        })
    }

    /// The two handoffs: the release's, and the leaving waiter's to the still place.
    async fn hand_off(&mut self, b: &common::Backend, base: &Locker) -> anyhow::Result<()> {
        let notify = self.notify;
        let [release, leave, _] = &self.keys;
        assert!(self.released.take().context("held")?.release().await?);
        let (owner, token) = holder_of(base, release).await?;
        assert_eq!(
            owner, self.handed_owner,
            "notify {notify}: handed to the waiter"
        );
        assert!(self.left.take().context("held")?.release().await?);
        self.leaving_wait.abort();
        // Its wait leaves the queue, passing the grant it was handed on to the still place.
        common::fair::until(|| async {
            Ok(holder_of(base, leave).await?.0 == STILL
                && common::fair::queued(b, base, leave).await? == 1)
        })
        .await?;
        let (_, still_token) = holder_of(base, leave).await?;
        self.tokens = (token, still_token);
        Ok(())
    }

    /// What the crash must have kept: the grants handed on, with their tokens, which
    /// nobody else gets and the waiter takes up; released, swept and taken afresh, the
    /// keys' tokens rise past them.
    async fn check(self, b: &common::Backend, after: &Locker) -> anyhow::Result<()> {
        let notify = self.notify;
        let [release, leave, _] = &self.keys;
        let (token, still_token) = self.tokens;
        assert_eq!(
            holder_of(after, release).await.ok(),
            Some((self.handed_owner.clone(), token)),
            "notify {notify}: the release's handoff was lost in the crash"
        );
        assert_eq!(
            holder_of(after, leave).await.ok(),
            Some((STILL.to_owned(), still_token)),
            "notify {notify}: the leaving waiter's handoff was lost in the crash"
        );
        // Nobody else gets the keys meanwhile.
        let newcomer = b.locker().await?;
        assert!(newcomer.try_acquire(release).await?.is_none());
        assert!(newcomer.try_acquire(leave).await?.is_none());

        // The waiter takes up the grant it was handed, at its next look.
        let g = timeout(QUIET_POLL * 3, self.handed_wait).await???;
        assert_eq!(g.fencing_token(), token, "notify {notify}");

        assert!(g.release().await?);
        assert!(after.force_release_now(leave).await?);
        after.sweep(sqlock::SweepOptions::new()).await?;
        for (key, before) in [(release, token), (leave, still_token)] {
            let fresh = newcomer
                .try_acquire(key)
                .await?
                .context("free after release")?;
            assert!(
                fresh.fencing_token() > before,
                "notify {notify}: {key}: token {} after {before}",
                fresh.fencing_token()
            );
            assert!(fresh.release().await?);
        }
        drop(self.holder);
        Ok(())
    }
}

/// One round: the handoffs of both sides (without and with release wake-ups), a
/// relaxed release after them on each side, one crash. `Ok(false)` when the crash lost
/// nothing (a relaxed release survived): the round proves nothing. Both sides meet the
/// one crash, so that the waiters' quiet looks are waited out once.
async fn round(b: &common::Backend, restore: &mut Restore) -> anyhow::Result<bool> {
    let base = b.fresh_table().await?;
    let mut sides = Vec::new();
    for notify in [false, true] {
        sides.push(Side::set_up(b, &base, notify).await?);
    }

    // From here nothing may write the WAL out but a commit that waits for its flush.
    let pid = b
        .scalar(
            base.pool(),
            "SELECT pid::BIGINT FROM pg_stat_activity WHERE backend_type = 'walwriter'",
        )
        .await?;
    let walwriter = Pid::from_raw(i32::try_from(pid)?);
    kill(walwriter, Signal::SIGSTOP)?;
    restore.walwriter = Some(walwriter);

    for side in &mut sides {
        side.hand_off(b, &base).await?;
    }
    // The relaxed releases after every handoff: a handoff's flush would write out one
    // made before it.
    for side in &mut sides {
        assert!(side.probe_guard.take().context("held")?.release().await?);
    }

    fault_db("crash").await?;
    restore.walwriter = None;
    fault_db("start").await?;

    let after = b.locker().await?;
    // The fault took: each probe's release, acknowledged after the handoffs, was lost.
    for side in &sides {
        let probe_after = after.lock_info(&side.keys[2]).await?;
        if probe_after.is_none() {
            eprintln!(
                "notify {}: the crash lost nothing; the round is run again",
                side.notify
            );
            for side in &sides {
                side.handed_wait.abort();
            }
            return Ok(false);
        }
        assert_eq!(
            probe_after.map(|i| i.owner),
            Some(side.probe.owner().to_string())
        );
    }
    for side in sides {
        side.check(b, &after).await?;
    }
    Ok(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_handoff_survives_a_crash() -> anyhow::Result<()> {
    let servers = common::fault_servers("fair_crash").await;
    for b in servers.iter().filter(|b| b.dialect == Dialect::Postgres) {
        let mut restore = Restore { walwriter: None };
        let mut took = false;
        for _ in 0..ROUNDS {
            if round(b, &mut restore).await? {
                took = true;
                break;
            }
        }
        assert!(took, "no crash lost anything in {ROUNDS} rounds");
    }
    Ok(())
}
