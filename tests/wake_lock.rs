//! A release wakes the waiters of its key in other processes inside the server: the
//! holder keeps the key's wake lock while it holds the key and lets it go once its
//! release has committed, and a waiter that found the key busy waits for that lock
//! between its polls (`LockerBuilder::server_waits`). The waiters here poll once a
//! minute and are granted long before that, at their first attempt after the wake;
//! with server waits off the same waiter is still waiting seconds after the release.
//! The holders' pools connect apart from the waiters', so that this process's own
//! wake-ups (`keepers/wake.rs`) never reach them: only the server can wake them.
//!
//! On SQLite a wake lock is a file lock beside the database, which shows no waiter:
//! there a wait is seen by what it does alone.
#![cfg(all(
    feature = "metrics",
    feature = "postgres",
    feature = "mysql",
    feature = "sqlite"
))]

mod common;

use std::time::{Duration, Instant};

use sqlock::{DbPool, Dialect, Locker, Strategy};

use common::recorded::counter;
use common::Backend;

/// The waiters' polls: after a busy answer a waiter looks again 30 s to 60 s later.
const QUIET_POLL: Duration = Duration::from_secs(60);

/// How long a waiter waits for the key: shorter than its first pause, so that only a
/// wake-up can have it granted in time.
const WITHIN: Duration = Duration::from_secs(20);

/// One test of this file at a time: MariaDB shows a wait for a wake lock without its
/// key, so each counts every such wait on the server as its own.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Busy answers counted on `table` for `strategy`.
fn busy(strategy: &str, table: &str) -> u64 {
    counter(&format!(
        "sqlock_busy_total{{strategy={strategy},table={table}}}"
    ))
}

/// The sessions that hold `key`'s wake lock and that wait for it, as the server shows
/// them. On MariaDB a wait names no key: any session waiting for a wake lock counts
/// (each test of this file runs its servers' keys one at a time). On SQLite whether
/// the key's wake file is locked, and [`UNSEEN`] waiters.
async fn wake_lock(b: &Backend, admin: &DbPool, key: &str) -> anyhow::Result<(i64, i64)> {
    let name = format!("{}:{key}", b.table);
    Ok(match b.dialect {
        Dialect::Postgres => {
            let of = format!(
                "FROM pg_locks WHERE locktype = 'advisory' AND classid = 1936813169 \
                 AND objid = CAST(hashtext(current_schema() || '.' || '{name}') AS oid) \
                 AND objsubid = 2 AND database = (SELECT oid FROM pg_database \
                 WHERE datname = current_database())"
            );
            let held = b
                .scalar(
                    admin,
                    &format!("SELECT count(*) {of} AND granted AND mode = 'ExclusiveLock'"),
                )
                .await?;
            let waiting = b
                .scalar(admin, &format!("SELECT count(*) {of} AND NOT granted"))
                .await?;
            (held, waiting)
        }
        Dialect::Sqlite => (locked(&wake_file(b, &name)?)?, UNSEEN),
        _ => {
            let held = b
                .scalar(
                    admin,
                    &format!(
                        "SELECT CAST(IS_USED_LOCK(CONCAT('sqlock:w:', MD5(CONCAT(\
                         IFNULL(DATABASE(), ''), '.', '{name}')))) IS NOT NULL AS SIGNED)"
                    ),
                )
                .await?;
            let waiting = b
                .scalar(
                    admin,
                    "SELECT CAST(count(*) AS SIGNED) FROM information_schema.PROCESSLIST \
                     WHERE STATE = 'User lock' AND INFO LIKE '%sqlock:w:%'",
                )
                .await?;
            (held, waiting)
        }
    })
}

/// The waiters of a wake file: not to be seen.
const UNSEEN: i64 = -1;

/// The wake file of the wake lock named `name`, as the library names it: one of 4096
/// files beside the database, by FNV-1a of the name.
fn wake_file(b: &Backend, name: &str) -> anyhow::Result<std::path::PathBuf> {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, c| {
        (h ^ u64::from(c)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut dir = std::fs::canonicalize(b.sqlite_file())?.into_os_string();
    dir.push("-sqlock-wake");
    Ok(std::path::PathBuf::from(dir).join(format!("{:03x}", hash % 4096)))
}

/// Whether `file` is locked by another (1) or not (0, or no such file).
fn locked(file: &std::path::Path) -> anyhow::Result<i64> {
    use nix::fcntl::{Flock, FlockArg};
    Ok(match std::fs::File::open(file) {
        Ok(f) => match Flock::lock(f, FlockArg::LockSharedNonblock) {
            Ok(_) => 0,
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => 1,
            Err((_, e)) => anyhow::bail!("trying {}: {e}", file.display()),
        },
        Err(_) => 0,
    })
}

/// Whether the waits seen are `want` (those not to be seen aside).
fn waits_are(seen: (i64, i64), want: (i64, i64)) -> bool {
    seen.0 == want.0 && (seen.1 == UNSEEN || seen.1 == want.1)
}

/// Ends the session that holds `key`'s wake lock: how many were ended.
async fn kill_wake_session(b: &Backend, admin: &DbPool, key: &str) -> anyhow::Result<i64> {
    let name = format!("{}:{key}", b.table);
    match (b.dialect, admin) {
        (Dialect::Postgres, _) => {
            b.scalar(
                admin,
                &format!(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_locks \
                     WHERE locktype = 'advisory' AND classid = 1936813169 AND granted \
                     AND objid = CAST(hashtext(current_schema() || '.' || '{name}') AS oid)"
                ),
            )
            .await
        }
        (_, DbPool::MySql(p)) => {
            let id: Option<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT CAST(IS_USED_LOCK(CONCAT('sqlock:w:', MD5(CONCAT(\
                 IFNULL(DATABASE(), ''), '.', '{name}')))) AS SIGNED)"
            )))
            .fetch_one(p)
            .await?;
            let Some(id) = id else { return Ok(0) };
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("KILL CONNECTION {id}")))
                .execute(p)
                .await?;
            Ok(1)
        }
        _ => anyhow::bail!("no wake locks on {}", b.dialect),
    }
}

/// Waits until `key`'s wake lock is held (`held`) or not, and until `waiting` sessions
/// wait for it (`None`: any number): whether that came within 30 s.
async fn until_wake_lock(
    b: &Backend,
    admin: &DbPool,
    key: &str,
    held: bool,
    waiting: Option<i64>,
) -> anyhow::Result<bool> {
    common::eventually(|| async {
        let (h, w) = wake_lock(b, admin, key).await?;
        Ok((h > 0) == held && (w == UNSEEN || waiting.is_none_or(|n| w == n)))
    })
    .await
}

/// A handle that waits quietly: it polls every [`QUIET_POLL`], with `waits` waits in
/// the server.
async fn quiet(b: &Backend, strategy: Strategy, waits: u32) -> anyhow::Result<Locker> {
    Ok(b.builder()
        .await?
        .strategy(strategy)
        .ttl(QUIET_POLL * 5)
        .poll_interval(QUIET_POLL, QUIET_POLL)
        .server_waits(waits)
        .build()?)
}

/// How a holder ends its hold in [`a_release_wakes_a_waiter_of_another_process`].
#[derive(Debug, Clone, Copy)]
enum End {
    /// `release()`.
    Release,
    /// The guard dropped: released in the background.
    Drop,
    /// Held twice (re-entered); the inner release keeps the key, the outer frees it.
    Reentered,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_of_another_process() -> anyhow::Result<()> {
    let _alone = ONE_AT_A_TIME.lock().await;
    // One backend after the other: the busy answers counted name the table alone.
    for b in common::backends("wake_lock_release").await {
        b.fresh_table().await?;
        let d = b.dialect;
        let admin = b.pool().await?;
        let cases = [
            (Strategy::Lease, "lease", End::Release, 2),
            (Strategy::Insert, "insert", End::Release, 2),
            (Strategy::Lease, "lease", End::Drop, 2),
            (Strategy::Lease, "lease", End::Reentered, 2),
            (Strategy::Fair, "fair", End::Release, 2),
            (Strategy::Lease, "lease", End::Release, 0),
        ];
        for (strategy, label, end, waits) in cases {
            let key = format!("wake-{label}-{end:?}-{waits}");
            let what = format!("{d} {label} {end:?}, server waits {waits}");
            // The holder keeps the default: a wake lock while it holds.
            let holder = b
                .builder_apart()
                .await?
                .strategy(strategy)
                .ttl(QUIET_POLL * 5)
                .build()?;
            let guard = holder.acquire(&key).await?;
            let inner = match end {
                End::Reentered => Some(holder.acquire(&key).await?),
                _ => None,
            };
            anyhow::ensure!(
                until_wake_lock(&b, &admin, &key, true, Some(0)).await?,
                "{what}: the holder never took the key's wake lock"
            );
            let waiter = quiet(&b, strategy, waits).await?;
            let before = busy(label, &b.table);
            let waiting = tokio::spawn({
                let key = key.clone();
                let waiter = waiter.clone();
                async move { waiter.acquire_timeout(&key, WITHIN).await }
            });
            // A fair waiter waits in the queue, first in it.
            let seen = common::eventually(|| async {
                Ok(match strategy {
                    Strategy::Fair => common::fair::queued(&b, &waiter, &key).await? == 1,
                    _ => busy(label, &b.table) > before,
                })
            })
            .await?;
            anyhow::ensure!(seen, "{what}: the waiter never waited");
            if waits > 0 {
                anyhow::ensure!(
                    until_wake_lock(&b, &admin, &key, true, Some(1)).await?,
                    "{what}: the waiter never waited in the server for the wake lock"
                );
            } else {
                let waiting_now = wake_lock(&b, &admin, &key).await?.1;
                assert!(
                    waiting_now == 0 || waiting_now == UNSEEN,
                    "{what}: a waiter with server waits off waits in the server"
                );
            }
            let busy_seen = busy(label, &b.table);
            if let Some(inner) = inner {
                assert!(inner.release().await?, "{what}");
                // The key is still held: its wake lock stays, and the waiter waits on.
                tokio::time::sleep(Duration::from_millis(300)).await;
                let (held, waiting_now) = wake_lock(&b, &admin, &key).await?;
                assert!(
                    held == 1 && (waiting_now == 1 || waiting_now == UNSEEN),
                    "{what}: an inner release let the wake lock go"
                );
                assert!(!waiting.is_finished(), "{what}: granted under a holder");
            }
            let released = Instant::now();
            match end {
                End::Drop => drop(guard),
                _ => assert!(guard.release().await?, "{what}"),
            }
            if waits == 0 {
                tokio::time::sleep(Duration::from_secs(3)).await;
                assert!(
                    !waiting.is_finished(),
                    "{what}: a polling waiter was granted before its next poll"
                );
                waiting.abort();
                continue;
            }
            let granted = waiting
                .await?
                .map_err(|e| anyhow::anyhow!("{what}: not woken by the release: {e}"))?;
            eprintln!(
                "{what}: granted to a waiter of another process {:?} after the release",
                released.elapsed()
            );
            // Woken once the release had committed: its first attempt was granted.
            assert_eq!(
                busy(label, &b.table),
                busy_seen,
                "{what}: the woken waiter found the key still busy"
            );

            // The new holder keeps the wake lock in turn, and lets it go at its release.
            anyhow::ensure!(
                until_wake_lock(&b, &admin, &key, true, Some(0)).await?,
                "{what}: the new holder never took the wake lock"
            );
            assert!(granted.release().await?, "{what}");
            anyhow::ensure!(
                until_wake_lock(&b, &admin, &key, false, Some(0)).await?,
                "{what}: the wake lock outlived the last release"
            );
        }
    }
    Ok(())
}

/// A wake lock only wakes: when the holder's wake lock connection is killed, the server
/// lets the lock go and the waiter wakes, tries, and finds the key still held (the row
/// is the truth); the holder keeps its lease, and the waiter is granted at the release
/// by its polls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_lock_lost_with_its_connection_grants_nothing() -> anyhow::Result<()> {
    let _alone = ONE_AT_A_TIME.lock().await;
    for b in common::backends("wake_lock_lost").await {
        if b.dialect == Dialect::Sqlite {
            continue;
        }
        b.fresh_table().await?;
        let d = b.dialect;
        let admin = b.pool().await?;
        let key = "lost";
        let holder = b.builder_apart().await?.ttl(QUIET_POLL * 5).build()?;
        let guard = holder.acquire(key).await?;
        anyhow::ensure!(
            until_wake_lock(&b, &admin, key, true, Some(0)).await?,
            "{d}: the holder never took the wake lock"
        );
        // Polls every 300 ms to 1 s: granted soon after the release without any wake.
        let waiter = b
            .builder()
            .await?
            .ttl(QUIET_POLL * 5)
            .poll_interval(Duration::from_millis(300), Duration::from_secs(1))
            .server_waits(2)
            .build()?;
        let before = busy("lease", &b.table);
        let waiting = tokio::spawn({
            let waiter = waiter.clone();
            async move { waiter.acquire_timeout(key, WITHIN).await }
        });
        anyhow::ensure!(
            until_wake_lock(&b, &admin, key, true, Some(1)).await?,
            "{d}: the waiter never waited in the server"
        );
        let seen = busy("lease", &b.table);
        anyhow::ensure!(seen > before, "{d}: the waiter never found the key busy");
        anyhow::ensure!(
            kill_wake_session(&b, &admin, key).await? == 1,
            "{d}: nothing was killed"
        );
        // The fault took: the lock was let go with its session, which woke the waiter,
        // whose attempt found the key busy.
        anyhow::ensure!(
            common::eventually(|| async { Ok(busy("lease", &b.table) > seen) }).await?,
            "{d}: the killed wake lock woke nobody"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiting.is_finished(), "{d}: granted beside a live holder");
        assert!(!guard.is_lost(), "{d}: the holder lost its lease");
        assert!(guard.release().await?, "{d}: the holder's release");
        let granted = waiting
            .await?
            .map_err(|e| anyhow::anyhow!("{d}: never granted after the release: {e}"))?;
        assert!(granted.release().await?, "{d}");
    }
    Ok(())
}

/// The sessions that wait for `key`'s wake lock and for its wake turn, as the server
/// shows them. On MariaDB a wait names no key, and every wait's statement names both
/// locks: the session that holds the turn waits for the wake lock, the others for the
/// turn. On SQLite whether the turn file is locked, and [`UNSEEN`].
async fn waits(b: &Backend, admin: &DbPool, key: &str) -> anyhow::Result<(i64, i64)> {
    let name = format!("{}:{key}", b.table);
    Ok(match b.dialect {
        Dialect::Sqlite => {
            let mut file = wake_file(b, &name)?.into_os_string();
            file.push("q");
            (locked(std::path::Path::new(&file))?, UNSEEN)
        }
        Dialect::Postgres => {
            let waiting = |class: u32| {
                format!(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
                     AND classid = {class} AND NOT granted \
                     AND objid = CAST(hashtext(current_schema() || '.' || '{name}') AS oid)"
                )
            };
            (
                b.scalar(admin, &waiting(1_936_813_169)).await?,
                b.scalar(admin, &waiting(1_936_813_170)).await?,
            )
        }
        _ => {
            // The session whose turn it is holds the turn; any other waits for it.
            let waiting = |turn: &str| {
                format!(
                    "SELECT CAST(count(*) AS SIGNED) FROM information_schema.PROCESSLIST \
                     WHERE STATE = 'User lock' AND INFO LIKE '%sqlock:q:%' \
                     AND COALESCE(ID = IS_USED_LOCK(CONCAT('sqlock:q:', MD5(CONCAT(\
                     IFNULL(DATABASE(), ''), '.', '{name}')))), FALSE) = {turn}"
                )
            };
            (
                b.scalar(admin, &waiting("TRUE")).await?,
                b.scalar(admin, &waiting("FALSE")).await?,
            )
        }
    })
}

/// A key's waiters take turns at its wake lock: a release wakes the waiter whose turn
/// it is, not every waiter at once to race for the row, and the next one's turn comes
/// once the new holder keeps the wake lock, so that the next release wakes it. No
/// waiter's attempt finds the key busy after the first two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_one_waiter_and_the_next_release_the_next() -> anyhow::Result<()> {
    let _alone = ONE_AT_A_TIME.lock().await;
    for b in common::backends("wake_lock_turns").await {
        b.fresh_table().await?;
        let d = b.dialect;
        let admin = b.pool().await?;
        let key = "turns";
        // Three processes as far as wake-ups go: only the server wakes a waiter.
        let holder = b.builder_apart_as(1).await?.ttl(QUIET_POLL * 5).build()?;
        let quiet_apart = |n: usize| {
            let b = &b;
            async move {
                anyhow::Ok(
                    b.builder_apart_as(n)
                        .await?
                        .ttl(QUIET_POLL * 5)
                        .poll_interval(QUIET_POLL, QUIET_POLL)
                        .server_waits(2)
                        .build()?,
                )
            }
        };
        let (first, second) = (quiet_apart(2).await?, quiet_apart(3).await?);
        let guard = holder.acquire(key).await?;
        anyhow::ensure!(
            until_wake_lock(&b, &admin, key, true, None).await?,
            "{d}: the holder never took the wake lock"
        );
        let before = busy("lease", &b.table);
        let waiting_first = tokio::spawn({
            let first = first.clone();
            async move { first.acquire_timeout(key, WITHIN).await }
        });
        anyhow::ensure!(
            common::eventually(|| async { Ok(waits_are(waits(&b, &admin, key).await?, (1, 0))) })
                .await?,
            "{d}: the first waiter never waited for the wake lock"
        );
        anyhow::ensure!(
            common::eventually(|| async { Ok(busy("lease", &b.table) == before + 1) }).await?,
            "{d}: the first waiter never found the key busy"
        );
        let waiting_second = tokio::spawn({
            let second = second.clone();
            async move { second.acquire_timeout(key, WITHIN).await }
        });
        anyhow::ensure!(
            common::eventually(|| async { Ok(waits_are(waits(&b, &admin, key).await?, (1, 1))) })
                .await?,
            "{d}: the second waiter never waited for its turn"
        );
        anyhow::ensure!(
            common::eventually(|| async { Ok(busy("lease", &b.table) == before + 2) }).await?,
            "{d}: the second waiter never found the key busy"
        );
        let busy_seen = busy("lease", &b.table);

        assert!(guard.release().await?, "{d}");
        let granted = waiting_first
            .await?
            .map_err(|e| anyhow::anyhow!("{d}: the first waiter was not woken: {e}"))?;
        // The second waits for the new holder's wake lock now, having tried nothing.
        anyhow::ensure!(
            common::eventually(|| async { Ok(waits_are(waits(&b, &admin, key).await?, (1, 0))) })
                .await?,
            "{d}: the second waiter never waited for the new holder's wake lock"
        );
        assert!(!waiting_second.is_finished(), "{d}: granted under a holder");
        assert_eq!(
            busy("lease", &b.table),
            busy_seen,
            "{d}: the release woke the second waiter too, to find the key taken"
        );

        assert!(granted.release().await?, "{d}");
        let granted = waiting_second
            .await?
            .map_err(|e| anyhow::anyhow!("{d}: the second waiter was not woken: {e}"))?;
        assert_eq!(busy("lease", &b.table), busy_seen, "{d}");
        assert!(granted.release().await?, "{d}");
        anyhow::ensure!(
            common::eventually(|| async { Ok(waits_are(waits(&b, &admin, key).await?, (0, 0))) })
                .await?,
            "{d}: a wait outlived the last waiter"
        );
    }
    Ok(())
}

/// A writer's release wakes the readers of another process waiting for it, every one
/// of them: the write side is a lease on the lock's name, which keeps the name's wake
/// lock, and a read waits for it in the server without turns (each reader may be
/// granted). Two readers, each on a pool apart and polling once a minute, are seen
/// waiting (the server shows both waits; on SQLite, their attempts were sent while the
/// writer held), and both are granted within 20 s of the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_release_wakes_every_reader_of_another_process() -> anyhow::Result<()> {
    let _alone = ONE_AT_A_TIME.lock().await;
    for b in common::backends("wake_lock_readers").await {
        b.fresh_table().await?;
        let d = b.dialect;
        let admin = b.pool().await?;
        let name = "document";
        let statements = || counter(&format!("sqlock_statements_total{{table={}}}", b.table));
        let writer = b.builder_apart_as(1).await?.ttl(QUIET_POLL * 5).build()?;
        let write = writer.write_lock(name).acquire().await?;
        anyhow::ensure!(
            until_wake_lock(&b, &admin, name, true, Some(0)).await?,
            "{d}: the writer never took the name's wake lock"
        );
        let before = statements();
        let mut readers = Vec::new();
        for n in [2, 3] {
            let reader = b
                .builder_apart_as(n)
                .await?
                .ttl(QUIET_POLL * 5)
                .poll_interval(QUIET_POLL, QUIET_POLL)
                .server_waits(2)
                .build()?;
            let waiting = tokio::spawn({
                let reader = reader.clone();
                async move { reader.read_lock(name).acquire_timeout(WITHIN).await }
            });
            readers.push((reader, waiting));
        }
        let seen = common::eventually(|| async {
            let (_, waiting) = wake_lock(&b, &admin, name).await?;
            Ok(statements() >= before + 2 && (waiting == 2 || waiting == UNSEEN))
        })
        .await?;
        anyhow::ensure!(seen, "{d}: the readers never waited for the writer");
        let released = Instant::now();
        assert!(write.release().await?, "{d}");
        for (_, waiting) in readers {
            let read = waiting
                .await?
                .map_err(|e| anyhow::anyhow!("{d}: a reader was not woken: {e}"))?;
            assert!(read.release().await?, "{d}");
        }
        eprintln!(
            "{d}: both readers granted {:?} after the write's release",
            released.elapsed()
        );
    }
    Ok(())
}

/// A lock waiter whose key a handle of its own process holds is woken by that hold's
/// release within the process (`keepers/wake.rs`), and waits in the server for no wake
/// lock and no turn meanwhile: such a wait would add statements and keep a turn that
/// waiters of other processes need. The same waits are seen at once for a waiter of
/// another process (the control), so that their absence is no blind spot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_of_a_key_held_in_its_own_process_waits_for_its_wake_up_alone(
) -> anyhow::Result<()> {
    let _alone = ONE_AT_A_TIME.lock().await;
    for b in common::backends("wake_lock_here").await {
        b.fresh_table().await?;
        let d = b.dialect;
        let admin = b.pool().await?;
        let key = "here";
        // The holder's pool connects as the waiter's: the same process, as sqlock sees
        // it. It keeps wake locks whatever the suite's setting (as the waiters wait in
        // the server whatever it is), so that the control has something to wait for.
        let holder = b
            .builder()
            .await?
            .ttl(QUIET_POLL * 5)
            .server_waits(2)
            .build()?;
        for apart in [false, true] {
            let what = format!("{d}, waiter apart: {apart}");
            let guard = holder.acquire(key).await?;
            anyhow::ensure!(
                until_wake_lock(&b, &admin, key, true, Some(0)).await?,
                "{what}: the holder never took the key's wake lock"
            );
            let waiter = if apart {
                b.builder_apart().await?
            } else {
                b.builder().await?
            }
            .ttl(QUIET_POLL * 5)
            .poll_interval(QUIET_POLL, QUIET_POLL)
            .server_waits(2)
            .build()?;
            let before = busy("lease", &b.table);
            let waiting = tokio::spawn({
                let waiter = waiter.clone();
                async move { waiter.acquire_timeout(key, WITHIN).await }
            });
            anyhow::ensure!(
                common::eventually(|| async { Ok(busy("lease", &b.table) > before) }).await?,
                "{what}: the waiter never found the key busy"
            );
            let seen = busy("lease", &b.table);
            if apart {
                // The control: a wait in the server for the wake lock, holding the turn.
                anyhow::ensure!(
                    common::eventually(|| async { Ok(waits(&b, &admin, key).await?.0 == 1) })
                        .await?,
                    "{what}: the waiter of another process never waited in the server"
                );
            } else {
                // A wait in the server begins right after the busy answer and would last
                // the waiter's whole pause: none in half a second is none at all.
                for _ in 0..25 {
                    let (first, rest) = waits(&b, &admin, key).await?;
                    assert!(
                        first == 0 && (rest == 0 || rest == UNSEEN),
                        "{what}: the waiter waits in the server: {first} / {rest}"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            assert!(guard.release().await?, "{what}");
            let granted = waiting
                .await?
                .map_err(|e| anyhow::anyhow!("{what}: not woken by the release: {e}"))?;
            // Woken once the release had committed: its first attempt was granted.
            assert_eq!(busy("lease", &b.table), seen, "{what}: found the key busy");
            assert!(granted.release().await?, "{what}");
            anyhow::ensure!(
                until_wake_lock(&b, &admin, key, false, Some(0)).await?,
                "{what}: the wake lock outlived the last release"
            );
        }
    }
    Ok(())
}
