//! Release wake-ups (`LockerBuilder::notify_waiters`): on PostgreSQL a release wakes a
//! waiter long before its next poll; elsewhere, and with transaction pooling, the
//! setting is refused with an explanation.

mod common;

use std::time::Duration;

use sqlock::{Dialect, Error, Locker, Strategy};

/// So long that a waiter which depended on polling would not try again within the
/// test's deadline: its first wait is at least half of this.
const POLL: Duration = Duration::from_secs(60);

/// How long the waiter may wait in all: a release comes about a second in.
const DEADLINE: Duration = Duration::from_secs(8);

/// Holder and waiter on pools of their own; the waiter (made with or without wake-ups)
/// waits with a deadline far shorter than its poll interval, and the holder releases
/// while it waits. Returns the waiter's outcome. The waiter waits in the server for no
/// wake lock (`server_waits(0)`): what wakes it here is the notification alone.
async fn handoff(
    b: &common::Backend,
    strategy: Strategy,
    notify: bool,
) -> anyhow::Result<Result<i64, Error>> {
    // Apart: a release of this process's own pools would wake the waiter without
    // notifications, which the control without wake-ups below must not see.
    let holder = b
        .builder_apart()
        .await?
        .strategy(strategy)
        .notify_waiters(true)
        .build()?;
    let waiter = b
        .builder()
        .await?
        .strategy(strategy)
        .notify_waiters(notify)
        .poll_interval(POLL, POLL)
        .server_waits(0)
        .build()?;
    let key = format!("wake-{strategy}");
    let held = holder.acquire(&key).await?;
    let first = held.fencing_token();
    let task = {
        let (waiter, key) = (waiter.clone(), key.clone());
        tokio::spawn(async move {
            waiter
                .acquire_timeout(&key, DEADLINE)
                .await
                .map(|g| g.fencing_token())
        })
    };
    // The waiter has made its first attempt, found the lock held, and is waiting.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!task.is_finished(), "the waiter got a held lock");
    assert!(held.release().await?);
    let outcome = task.await?;
    if let Ok(token) = &outcome {
        assert!(*token > first, "tokens rise: {first} then {token}");
    }
    Ok(outcome)
}

#[tokio::test]
async fn a_release_wakes_a_waiter_long_before_its_next_poll() -> anyhow::Result<()> {
    for b in common::backends_of("notify_wake", &[Dialect::Postgres]).await {
        b.fresh_table().await?;
        for strategy in [Strategy::Lease, Strategy::Insert] {
            // Woken by the release: acquired within the deadline, although the next
            // poll lies far beyond it.
            let token = handoff(&b, strategy, true).await?;
            assert!(
                token.is_ok(),
                "{strategy}: the waiter was not woken: {token:?}"
            );
        }
        // Without wake-ups the same waiter sleeps through the deadline: the wake-up
        // above was the notification, not a poll.
        let polled = handoff(&b, Strategy::Lease, false).await?;
        assert!(
            matches!(polled, Err(Error::Timeout { .. })),
            "a polling waiter got the lock before its next poll: {polled:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_force_release_wakes_waiters_too() -> anyhow::Result<()> {
    for b in common::backends_of("notify_force", &[Dialect::Postgres]).await {
        b.fresh_table().await?;
        let holder = b.builder().await?.notify_waiters(true).build()?;
        let waiter = b
            .builder()
            .await?
            .notify_waiters(true)
            .poll_interval(POLL, POLL)
            .build()?;
        let _held = holder.acquire("stuck").await?;
        let task = {
            let waiter = waiter.clone();
            tokio::spawn(async move { waiter.acquire_timeout("stuck", DEADLINE).await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(holder.force_release_now("stuck").await?);
        let got = task.await?;
        assert!(got.is_ok(), "not woken by a force release: {got:?}");
    }
    Ok(())
}

#[tokio::test]
async fn notify_is_refused_where_it_cannot_work() -> anyhow::Result<()> {
    for b in common::backends("notify_refused").await {
        let pool = b.pool().await?;
        let built = Locker::builder(pool.clone()).notify_waiters(true).build();
        match b.dialect {
            Dialect::Postgres => {
                assert!(built.is_ok());
                let both = Locker::builder(pool)
                    .notify_waiters(true)
                    .transaction_pooling(true)
                    .build();
                let err = both.expect_err("notify with transaction pooling");
                assert!(matches!(err, Error::InvalidSettings(_)), "{err}");
                assert!(err.to_string().contains("LISTEN"), "{err}");
            }
            _ => {
                let err = built.expect_err("notify off PostgreSQL");
                assert!(
                    matches!(
                        err,
                        Error::SettingUnsupported {
                            setting: "notify_waiters",
                            ..
                        }
                    ),
                    "{err}"
                );
                assert!(err.to_string().contains("PostgreSQL"), "{err}");
                let pooling = Locker::builder(pool).transaction_pooling(true).build();
                assert!(matches!(
                    pooling,
                    Err(Error::SettingUnsupported {
                        setting: "transaction_pooling",
                        ..
                    })
                ));
            }
        }
    }
    Ok(())
}

/// The waiting primitives besides a lock, each woken by the release of what it waits
/// for: a multi-lock by one of its keys, a reader by the write side, a writer by the
/// last reader, a semaphore's waiter by a permit.
#[derive(Debug, Clone, Copy)]
enum Waiting {
    MultiLock,
    Reader,
    Writer,
    Permit,
}

/// What the holder holds while the waiter waits.
enum Held {
    Lock(sqlock::LockGuard),
    Permit(sqlock::SemaphoreGuard),
}

impl Held {
    async fn release(self) -> Result<bool, Error> {
        match self {
            Self::Lock(g) => g.release().await,
            Self::Permit(g) => g.release().await,
        }
    }
}

/// As [`handoff`], for `waiting`: the waiter's outcome, the holder's release having
/// come about a second into its wait. As there, the waiter waits in the server for no
/// wake lock (a reader would wait for the writer's): the notification alone wakes it.
async fn primitive_handoff(
    b: &common::Backend,
    waiting: Waiting,
    notify: bool,
) -> anyhow::Result<Result<(), Error>> {
    // Apart, as in `handoff`.
    let holder = b.builder_apart().await?.notify_waiters(true).build()?;
    let waiter = b
        .builder()
        .await?
        .notify_waiters(notify)
        .poll_interval(POLL, POLL)
        .server_waits(0)
        .build()?;
    let name = format!("wake-{waiting:?}-{notify}");
    let held = match waiting {
        Waiting::MultiLock => Held::Lock(holder.acquire(&format!("{name}-b")).await?),
        Waiting::Reader => Held::Lock(holder.write_lock(&name).acquire().await?),
        Waiting::Writer => Held::Lock(holder.read_lock(&name).acquire().await?),
        Waiting::Permit => Held::Permit(holder.semaphore(&name, 1).acquire().await?),
    };
    let task = tokio::spawn(async move {
        match waiting {
            Waiting::MultiLock => {
                let keys = [format!("{name}-a"), format!("{name}-b")];
                let g = waiter.lock_many(&keys).acquire_timeout(DEADLINE).await?;
                g.release().await.map(drop)
            }
            Waiting::Reader => {
                let g = waiter.read_lock(&name).acquire_timeout(DEADLINE).await?;
                g.release().await.map(drop)
            }
            Waiting::Writer => {
                let g = waiter.write_lock(&name).acquire_timeout(DEADLINE).await?;
                g.release().await.map(drop)
            }
            Waiting::Permit => {
                let g = waiter.semaphore(&name, 1).acquire_timeout(DEADLINE).await?;
                g.release().await.map(drop)
            }
        }
    });
    // The waiter has made its first attempt, found its primitive held, and is waiting.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !task.is_finished(),
        "{waiting:?}: the waiter got a held primitive"
    );
    assert!(held.release().await?, "{waiting:?}: the holder's release");
    Ok(task.await?)
}

#[tokio::test]
async fn every_waiting_primitive_is_woken_by_the_release_it_waits_for() -> anyhow::Result<()> {
    for b in common::backends_of("notify_family", &[Dialect::Postgres]).await {
        b.fresh_table().await?;
        let all = [
            Waiting::MultiLock,
            Waiting::Reader,
            Waiting::Writer,
            Waiting::Permit,
        ];
        // All at once (each on names of its own), with wake-ups and without: woken,
        // each gets its primitive within the deadline; polling, each sleeps through
        // it, so the grant above was the wake-up's, not a poll's.
        let mut runs = tokio::task::JoinSet::new();
        for waiting in all {
            for notify in [true, false] {
                let b = b.clone();
                runs.spawn(async move {
                    (
                        waiting,
                        notify,
                        primitive_handoff(&b, waiting, notify).await,
                    )
                });
            }
        }
        let mut wrong = Vec::new();
        while let Some(run) = runs.join_next().await {
            let (waiting, notify, outcome) = run?;
            let outcome = outcome?;
            if notify && outcome.is_err() {
                wrong.push(format!("{waiting:?}: not woken: {outcome:?}"));
            }
            if !notify && !matches!(outcome, Err(Error::Timeout { .. })) {
                wrong.push(format!(
                    "{waiting:?}: a polling waiter got it before its next poll: {outcome:?}"
                ));
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }
    Ok(())
}
