//! `sqlock run --limit N`: at most N copies of a command across hosts, each holding a
//! permit of the semaphore KEY of N permits.
//!
//! `run` holds what it took as a [`Held`]: a lock, or a permit. Both end the same way
//! (released once the command's group is empty, lost when their lease is), so `run`
//! supervises either alike.

use sqlock::{LockGuard, Locker, LostSignal, SemaphoreGuard};

use crate::args::RunArgs;
use crate::failure::Failure;

/// What `run` holds while its command runs.
pub(crate) enum Held {
    /// The lock on KEY.
    Lock(LockGuard),
    /// A permit of the semaphore KEY (`--limit`).
    Permit(SemaphoreGuard),
}

impl Held {
    pub(crate) fn lost(&self) -> LostSignal {
        match self {
            Self::Lock(g) => g.lost(),
            Self::Permit(g) => g.lost(),
        }
    }

    pub(crate) fn is_lost(&self) -> bool {
        match self {
            Self::Lock(g) => g.is_lost(),
            Self::Permit(g) => g.is_lost(),
        }
    }

    /// Gives it back: whether it was still held.
    pub(crate) async fn release(self) -> Result<bool, sqlock::Error> {
        match self {
            Self::Lock(g) => g.release().await,
            Self::Permit(g) => g.release().await,
        }
    }

    /// What the command's environment says of it: the key, owner and fencing token,
    /// and for a permit, the limit and the permit's slot key.
    pub(crate) fn env(&self, locker: &Locker, limit: Option<u32>) -> Vec<(&'static str, String)> {
        match self {
            Self::Lock(g) => vec![
                ("SQLOCK_KEY", g.key().to_owned()),
                ("SQLOCK_OWNER", g.owner().to_string()),
                ("SQLOCK_FENCING_TOKEN", g.fencing_token().to_string()),
            ],
            Self::Permit(g) => vec![
                ("SQLOCK_KEY", g.name().to_owned()),
                ("SQLOCK_OWNER", locker.owner().to_string()),
                ("SQLOCK_FENCING_TOKEN", g.fencing_token().to_string()),
                ("SQLOCK_LIMIT", limit.unwrap_or(1).to_string()),
                (
                    "SQLOCK_PERMIT",
                    g.keys().next().unwrap_or_default().to_owned(),
                ),
            ],
        }
    }
}

/// Takes a permit of the semaphore KEY of `limit` permits, as `--wait` and `--no-wait`
/// say.
pub(crate) async fn acquire(locker: &Locker, args: &RunArgs, limit: u32) -> Result<Held, Failure> {
    let sem = locker.semaphore(&args.key, limit).ttl(args.ttl);
    let busy = || {
        Failure::NotAcquired(format!(
            "all {limit} permits of {:?} are held elsewhere",
            args.key
        ))
    };
    let permit = match args.wait {
        _ if args.no_wait => sem.try_acquire().await?.ok_or_else(busy)?,
        Some(wait) if wait.is_zero() => sem.try_acquire().await?.ok_or_else(busy)?,
        Some(wait) => match sem.acquire_timeout(wait).await {
            Ok(permit) => permit,
            Err(sqlock::Error::Timeout { .. }) => {
                return Err(Failure::NotAcquired(format!(
                    "all {limit} permits of {:?} are still held elsewhere: --wait {} ran out",
                    args.key,
                    crate::duration::human(wait)
                )))
            }
            Err(e) => return Err(e.into()),
        },
        None => sem.acquire().await?,
    };
    Ok(Held::Permit(permit))
}
