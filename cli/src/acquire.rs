//! How `run` takes what its command runs under, as `--wait` and `--no-wait` say: the
//! lock on KEY (a plain lock, or a side of the read-write lock of that name), a permit
//! of the semaphore KEY (`--limit`: at most N copies of a command across hosts), or
//! the quorum lock on KEY over several databases (`quorum.rs`).

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

/// The request a run makes: the plain lock on the key, or a side of the read-write
/// lock of that name (`--shared`, `--exclusive`).
enum Request<'a> {
    Plain(sqlock::LockRequest<'a>),
    Side(sqlock::RwLockRequest<'a>),
}

impl Request<'_> {
    async fn try_acquire(self) -> sqlock::Result<Option<LockGuard>> {
        match self {
            Self::Plain(r) => r.try_acquire().await,
            Self::Side(r) => r.try_acquire().await,
        }
    }

    async fn acquire_timeout(self, wait: Duration) -> sqlock::Result<LockGuard> {
        match self {
            Self::Plain(r) => r.acquire_timeout(wait).await,
            Self::Side(r) => r.acquire_timeout(wait).await,
        }
    }

    async fn acquire(self) -> sqlock::Result<LockGuard> {
        match self {
            Self::Plain(r) => r.acquire().await,
            Self::Side(r) => r.acquire().await,
        }
    }
}

/// Takes the lock as `--wait` and `--no-wait` say.
async fn lock(locker: &Locker, args: &RunArgs) -> Result<LockGuard, Failure> {
    let request = if args.shared {
        Request::Side(locker.read_lock(&args.key).ttl(args.ttl))
    } else if args.exclusive {
        Request::Side(locker.write_lock(&args.key).ttl(args.ttl))
    } else {
        Request::Plain(
            locker
                .lock(&args.key)
                .ttl(args.ttl)
                .strategy(args.strategy()),
        )
    };
    let busy = || Failure::NotAcquired(format!("lock {:?} is held elsewhere", args.key));
    match args.wait {
        // A deadline shorter than a round trip would always time out (see
        // `acquire_timeout`): a zero wait means one attempt.
        _ if args.no_wait => request.try_acquire().await?.ok_or_else(busy),
        Some(wait) if wait.is_zero() => request.try_acquire().await?.ok_or_else(busy),
        Some(wait) => match request.acquire_timeout(wait).await {
            Ok(guard) => Ok(guard),
            // Said with the --wait the user wrote, not the few milliseconds more the
            // call took to notice.
            Err(sqlock::Error::Timeout { .. }) => Err(Failure::NotAcquired(format!(
                "lock {:?} is still held elsewhere: --wait {} ran out",
                args.key,
                crate::duration::human(wait)
            ))),
            Err(e) => Err(e.into()),
        },
        None => Ok(request.acquire().await?),
    }
}

/// Takes a permit of the semaphore KEY of `limit` permits, as `--wait` and `--no-wait`
/// say.
async fn permit(locker: &Locker, args: &RunArgs, limit: u32) -> Result<Held, Failure> {
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

/// Takes the quorum lock on KEY, as `--wait` and `--no-wait` say.
async fn quorum_lock(quorum: &Quorum, args: &RunArgs) -> Result<Held, Failure> {
    let request = quorum.lock(&args.key).ttl(args.ttl);
    let busy = || {
        Failure::NotAcquired(format!(
            "lock {:?} is held elsewhere on a majority of the databases",
            args.key
        ))
    };
    let guard = match args.wait {
        _ if args.no_wait => request.try_acquire().await?.ok_or_else(busy)?,
        Some(wait) if wait.is_zero() => request.try_acquire().await?.ok_or_else(busy)?,
        Some(wait) => match request.timeout(wait).acquire().await {
            Ok(guard) => guard,
            Err(sqlock::Error::Timeout { .. }) => {
                return Err(Failure::NotAcquired(format!(
                    "lock {:?} is still held elsewhere on a majority of the databases: \
                     --wait {} ran out",
                    args.key,
                    crate::duration::human(wait)
                )))
            }
            Err(e) => return Err(e.into()),
        },
        None => request.acquire().await?,
    };
    Ok(Held::Quorum(guard))
}
