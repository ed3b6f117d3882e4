//! How `run` takes what its command runs under, as `--wait` and `--no-wait` say: the
//! lock on KEY (a plain lock, or a side of the read-write lock of that name), a permit
//! of the semaphore KEY (`--limit`: at most N copies of a command across hosts), or
//! the quorum lock on KEY over several databases (`quorum.rs`).

use std::future::Future;
use std::time::Duration;

use sqlock::{LockGuard, Locker, Quorum};

use crate::args::RunArgs;
use crate::failure::Failure;
use crate::held::{Held, Target};

/// Takes what `args` asks for from `target`.
pub(crate) async fn acquire(target: Target<'_>, args: &RunArgs) -> Result<Held, Failure> {
    match (target, args.limit) {
        (Target::Quorum(quorum), _) => quorum_lock(quorum, args).await,
        (Target::Locker(locker), Some(limit)) => permit(locker, args, limit).await,
        (Target::Locker(locker), None) => lock(locker, args).await.map(Held::Lock),
    }
}

/// How long a run waits, as `--wait` and `--no-wait` say.
#[derive(Debug, Clone, Copy)]
enum Patience {
    /// One attempt: `--no-wait`, or a zero `--wait` (a deadline shorter than a round
    /// trip would always time out).
    Once,
    /// Until the `--wait` deadline.
    Until(Duration),
    /// As long as it takes.
    Ever,
}

/// Takes with `take`, as patient as `args` say: what it took, or the failure saying
/// that `subject` ("lock \"k\" is", "all 3 permits of \"k\" are") is held elsewhere
/// (`place` said after it), or still is when `--wait` ran out.
async fn as_asked<G, F, Fut>(
    args: &RunArgs,
    subject: &str,
    place: &str,
    take: F,
) -> Result<G, Failure>
where
    F: FnOnce(Patience) -> Fut,
    Fut: Future<Output = sqlock::Result<Option<G>>>,
{
    let patience = match args.wait {
        _ if args.no_wait => Patience::Once,
        Some(wait) if wait.is_zero() => Patience::Once,
        Some(wait) => Patience::Until(wait),
        None => Patience::Ever,
    };
    match (take(patience).await, patience) {
        (Ok(Some(taken)), _) => Ok(taken),
        (Ok(None), _) => Err(Failure::NotAcquired(format!(
            "{subject} held elsewhere{place}"
        ))),
        // Said with the --wait the user wrote, not the few milliseconds more the call
        // took to notice.
        (Err(sqlock::Error::Timeout { .. }), Patience::Until(wait)) => {
            Err(Failure::NotAcquired(format!(
                "{subject} still held elsewhere{place}: --wait {} ran out",
                crate::duration::human(wait)
            )))
        }
        (Err(e), _) => Err(e.into()),
    }
}

/// Takes the lock: the plain lock on the key, or a side of the read-write lock of that
/// name (`--shared`, `--exclusive`).
async fn lock(locker: &Locker, args: &RunArgs) -> Result<LockGuard, Failure> {
    let subject = format!("lock {:?} is", args.key);
    if args.shared || args.exclusive {
        let side = if args.shared {
            locker.read_lock(&args.key)
        } else {
            locker.write_lock(&args.key)
        };
        let side = side.ttl(args.ttl);
        return as_asked(args, &subject, "", |patience| async move {
            match patience {
                Patience::Once => side.try_acquire().await,
                Patience::Until(wait) => side.acquire_timeout(wait).await.map(Some),
                Patience::Ever => side.acquire().await.map(Some),
            }
        })
        .await;
    }
    let plain = locker
        .lock(&args.key)
        .ttl(args.ttl)
        .strategy(args.strategy());
    as_asked(args, &subject, "", |patience| async move {
        match patience {
            Patience::Once => plain.try_acquire().await,
            Patience::Until(wait) => plain.acquire_timeout(wait).await.map(Some),
            Patience::Ever => plain.acquire().await.map(Some),
        }
    })
    .await
}

/// Takes a permit of the semaphore KEY of `limit` permits.
async fn permit(locker: &Locker, args: &RunArgs, limit: u32) -> Result<Held, Failure> {
    let sem = locker.semaphore(&args.key, limit).ttl(args.ttl);
    let subject = format!("all {limit} permits of {:?} are", args.key);
    let permit = as_asked(args, &subject, "", |patience| async move {
        match patience {
            Patience::Once => sem.try_acquire().await,
            Patience::Until(wait) => sem.acquire_timeout(wait).await.map(Some),
            Patience::Ever => sem.acquire().await.map(Some),
        }
    })
    .await?;
    Ok(Held::Permit(permit))
}

/// Takes the quorum lock on KEY.
async fn quorum_lock(quorum: &Quorum, args: &RunArgs) -> Result<Held, Failure> {
    let request = quorum.lock(&args.key).ttl(args.ttl);
    let subject = format!("lock {:?} is", args.key);
    let place = " on a majority of the databases";
    let guard = as_asked(args, &subject, place, |patience| async move {
        match patience {
            Patience::Once => request.try_acquire().await,
            Patience::Until(wait) => request.timeout(wait).acquire().await.map(Some),
            Patience::Ever => request.acquire().await.map(Some),
        }
    })
    .await?;
    Ok(Held::Quorum(guard))
}
