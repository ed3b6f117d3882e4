//! The semaphore: acquire+release of one permit of a semaphore of 8 permits per second,
//! with 1 and 8 workers (a handle each), beside the mutex (a lease per worker on a key
//! of its own) measured the same way in the same run.
//!
//! Every acquisition of a semaphore takes its permits under the semaphore's gate, one
//! at a time: with 8 workers, this measures what that gate costs against keys that
//! share nothing.

use std::time::{Duration, Instant};

use sqlock::Locker;
use tokio::task::JoinSet;

use crate::args::BenchArgs;
use crate::failure::Failure;
use crate::figures::SemaphoreRun;
use crate::progress::Progress;
use crate::stats::Samples;
use crate::table::{KEY_PREFIX, TTL};

/// The worker counts measured.
const WORKERS: [usize; 2] = [1, 8];

/// N: as many permits as the most workers, so that a worker waits for the gate, not
/// for a permit.
const PERMITS: u32 = 8;

/// How long one acquisition may wait before the run counts as failed: nobody else
/// holds the benchmark's permits.
const TAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a worker cycles on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Primitive {
    Mutex,
    Semaphore,
}

impl Primitive {
    fn label(self) -> &'static str {
        match self {
            Self::Mutex => "mutex (lease)",
            Self::Semaphore => "semaphore (1 of 8)",
        }
    }
}

/// Measures both primitives with each worker count, alternating them round by round.
pub(crate) async fn semaphore(
    base: &Locker,
    args: &BenchArgs,
    progress: &Progress,
) -> Result<Vec<SemaphoreRun>, Failure> {
    let mut runs = Vec::new();
    let round = args.duration / args.rounds.max(1);
    for workers in WORKERS {
        for primitive in [Primitive::Mutex, Primitive::Semaphore] {
            runs.push(SemaphoreRun {
                what: primitive.label(),
                workers,
                ops: 0,
                secs: 0.0,
                latency: Samples::default(),
            });
        }
        for r in 0..args.rounds {
            for (i, primitive) in [Primitive::Mutex, Primitive::Semaphore]
                .into_iter()
                .enumerate()
            {
                progress.note(&format!(
                    "semaphore: {} with {workers} workers, round {} of {}",
                    primitive.label(),
                    r + 1,
                    args.rounds
                ));
                let (ops, secs, latency) = cycle(base, primitive, workers, round).await?;
                // This worker count's two runs are the last two, in this order.
                let at = runs.len() - 2 + i;
                let run = &mut runs[at];
                run.ops += ops;
                run.secs += secs;
                run.latency.extend(&latency);
            }
        }
    }
    Ok(runs)
}

/// `workers` handles cycle for `round`: the acquisitions completed, the seconds, and
/// each cycle's latency.
async fn cycle(
    base: &Locker,
    primitive: Primitive,
    workers: usize,
    round: Duration,
) -> Result<(u64, f64, Samples), Failure> {
    let mut set = JoinSet::new();
    let started = Instant::now();
    let deadline = started + round;
    for w in 0..workers {
        let locker = Locker::builder(base.pool().clone())
            .table(base.table().as_str())
            .ttl(TTL)
            .build()?;
        set.spawn(async move {
            let key = format!("{KEY_PREFIX}mutex-{w}");
            let sem = locker.semaphore(&format!("{KEY_PREFIX}sem"), PERMITS);
            let (mut ops, mut latency) = (0u64, Samples::default());
            while Instant::now() < deadline {
                let t = Instant::now();
                match primitive {
                    Primitive::Mutex => {
                        locker
                            .acquire_timeout(&key, TAKE_TIMEOUT)
                            .await?
                            .release()
                            .await?;
                    }
                    Primitive::Semaphore => {
                        sem.acquire_timeout(TAKE_TIMEOUT).await?.release().await?;
                    }
                }
                latency.push(t.elapsed());
                ops += 1;
            }
            Ok::<_, Failure>((ops, latency))
        });
    }
    let (mut ops, mut latency) = (0, Samples::default());
    while let Some(joined) = set.join_next().await {
        let (o, l) = joined.map_err(|e| Failure::Other(format!("a worker failed: {e}")))??;
        ops += o;
        latency.extend(&l);
    }
    Ok((ops, started.elapsed().as_secs_f64(), latency))
}
