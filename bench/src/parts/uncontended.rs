//! Uncontended: workers cycling on keys of their own, the library beside its
//! baselines, and the statements one acquisition and one release send.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlock::{DbPool, Dialect, Locker, Strategy, TableName};
use tokio::task::JoinSet;

use crate::args::BenchArgs;
use crate::baseline::native;
use crate::baseline::raw;
#[cfg(feature = "redis-baseline")]
use crate::baseline::redis_lock::RedisWorker;
use crate::baseline::statements::{RawStatements, Values};
use crate::count::{self, Snapshot};
use crate::failure::{db_failure, Failure};
use crate::figures::{Measured, RoundTrips, Variant};
use crate::progress::Progress;
use crate::stats::Samples;
use crate::table::{KEY_PREFIX, TTL};

/// How many round-trip samples are taken per strategy.
const ROUND_TRIP_SAMPLES: u32 = 20;

/// Every variant with every worker count, then the statements of single acquisitions
/// and releases.
pub(crate) async fn measure(
    db: &DbPool,
    table: &TableName,
    strategies: &[Strategy],
    args: &BenchArgs,
    progress: &Progress,
) -> Result<(Vec<Measured>, Vec<RoundTrips>), Failure> {
    let ctx = Ctx::new(db, table, strategies, args)?;
    let measured = uncontended(&ctx, args, progress).await?;
    let round_trips = round_trips(&ctx, strategies).await?;
    Ok((measured, round_trips))
}

/// What the uncontended workers share.
struct Ctx {
    db: DbPool,
    raw: Arc<RawStatements>,
    lockers: HashMap<Strategy, Vec<Locker>>,
    owners: Vec<String>,
    variants: Vec<Variant>,
    redis_url: Option<String>,
}

impl Ctx {
    fn new(
        db: &DbPool,
        table: &TableName,
        strategies: &[Strategy],
        args: &BenchArgs,
    ) -> Result<Arc<Self>, Failure> {
        let most = args.most_workers() as usize;
        let mut lockers = HashMap::new();
        let mut variants = Vec::new();
        for &s in strategies {
            let b = Locker::builder(db.clone())
                .table(table.as_str())
                .strategy(s)
                .ttl(TTL)
                .build()?;
            lockers.insert(s, (0..most).map(|_| b.new_handle()).collect::<Vec<_>>());
            variants.push(Variant::Raw(s));
            variants.push(Variant::Library(s));
        }
        if db.dialect() != Dialect::Sqlite {
            variants.push(Variant::Native);
        }
        if args.redis_url.is_some() {
            variants.push(Variant::Redis);
        }
        let owners = lockers
            .values()
            .next()
            .map(|ls| {
                ls.iter()
                    .map(|l| l.new_handle().owner().to_string())
                    .collect()
            })
            .unwrap_or_default();
        Ok(Arc::new(Self {
            db: db.clone(),
            raw: Arc::new(RawStatements::new(db.dialect(), table)?),
            lockers,
            owners,
            variants,
            redis_url: args.redis_url.clone(),
        }))
    }
}

/// One uncontended worker's means.
enum Worker {
    Library(Locker, String),
    Raw(Values),
    Native(String),
    #[cfg(feature = "redis-baseline")]
    Redis(RedisWorker, String, String),
}

impl Worker {
    async fn new(ctx: &Ctx, v: Variant, i: usize) -> Result<Self, Failure> {
        let key = format!("{KEY_PREFIX}{}-{i}", v.strategy());
        Ok(match v {
            Variant::Library(s) => Self::Library(ctx.lockers[&s][i].clone(), key),
            Variant::Raw(s) => Self::Raw(Values {
                key,
                owner: ctx.owners[i].clone(),
                strategy: s,
                ttl_us: TTL.as_micros() as i64,
                token: 0,
            }),
            Variant::Native => Self::Native(key),
            #[cfg(feature = "redis-baseline")]
            Variant::Redis => {
                let url = ctx.redis_url.as_deref().unwrap_or_default();
                let w = RedisWorker::connect(url)
                    .await
                    .map_err(|e| Failure::Unavailable(format!("redis: {e}")))?;
                Self::Redis(w, format!("sqlock-{key}"), ctx.owners[i].clone())
            }
            #[cfg(not(feature = "redis-baseline"))]
            Variant::Redis => {
                let _ = &ctx.redis_url;
                return Err(Failure::Usage(
                    "the redis baseline needs the redis-baseline feature".into(),
                ));
            }
        })
    }

    /// One acquisition and release: the acquisition's latency, `None` when busy.
    async fn cycle(
        &mut self,
        db: &DbPool,
        raw_stmts: &RawStatements,
    ) -> Result<Option<Duration>, Failure> {
        match self {
            Self::Library(locker, key) => {
                let started = Instant::now();
                let Some(guard) = locker.try_acquire(key).await? else {
                    return Ok(None);
                };
                let latency = started.elapsed();
                if !guard.release().await? {
                    return Err(Failure::Other(format!(
                        "lock {key:?} was lost during the benchmark"
                    )));
                }
                Ok(Some(latency))
            }
            Self::Raw(values) => raw::cycle(db, raw_stmts, values).await.map_err(db_failure),
            Self::Native(key) => native::cycle(db, key).await.map_err(db_failure),
            #[cfg(feature = "redis-baseline")]
            Self::Redis(w, key, owner) => w
                .cycle(key, owner, TTL)
                .await
                .map_err(|e| Failure::Other(format!("redis: {e}"))),
        }
    }
}

/// Runs `v` with `n` workers for `d`.
async fn run_uncontended(
    ctx: &Arc<Ctx>,
    v: Variant,
    n: usize,
    d: Duration,
) -> Result<Measured, Failure> {
    let mut workers = Vec::with_capacity(n);
    for i in 0..n {
        workers.push(Worker::new(ctx, v, i).await?);
    }
    let before = count::snapshot();
    let started = Instant::now();
    let deadline = started + d;
    let mut set = JoinSet::new();
    for mut w in workers {
        let ctx = ctx.clone();
        set.spawn(async move {
            let (mut ops, mut busy, mut latency) = (0u64, 0u64, Samples::default());
            while Instant::now() < deadline {
                match w.cycle(&ctx.db, &ctx.raw).await? {
                    Some(l) => {
                        ops += 1;
                        latency.push(l);
                    }
                    None => busy += 1,
                }
            }
            Ok::<_, Failure>((ops, busy, latency))
        });
    }
    let mut m = Measured {
        variant: v,
        workers: n,
        ops: 0,
        busy: 0,
        secs: 0.0,
        latency: Samples::default(),
        stmts: Snapshot::default(),
    };
    while let Some(joined) = set.join_next().await {
        let (ops, busy, latency) =
            joined.map_err(|e| Failure::Other(format!("a worker failed: {e}")))??;
        m.ops += ops;
        m.busy += busy;
        m.latency.extend(&latency);
    }
    m.secs = started.elapsed().as_secs_f64();
    m.stmts = count::snapshot().since(&before);
    Ok(m)
}

/// Every variant with every worker count, in rounds that alternate the variants.
async fn uncontended(
    ctx: &Arc<Ctx>,
    args: &BenchArgs,
    progress: &Progress,
) -> Result<Vec<Measured>, Failure> {
    let most = args.most_workers() as usize;
    let warm = (args.duration / 10).clamp(Duration::from_millis(50), Duration::from_millis(300));
    progress.note("uncontended: warming up (connections opened, statements prepared)");
    for &v in &ctx.variants {
        run_uncontended(ctx, v, most, warm).await?;
    }
    let slice = args.duration / args.rounds;
    let mut out = Vec::new();
    for &n in &args.workers {
        let n = n as usize;
        let mut acc: Vec<Option<Measured>> = vec![None; ctx.variants.len()];
        for round in 0..args.rounds {
            progress.note(&format!(
                "uncontended: {n} worker(s), round {}/{}",
                round + 1,
                args.rounds
            ));
            let order: Vec<usize> = if round % 2 == 0 {
                (0..ctx.variants.len()).collect()
            } else {
                (0..ctx.variants.len()).rev().collect()
            };
            for i in order {
                let m = run_uncontended(ctx, ctx.variants[i], n, slice).await?;
                match &mut acc[i] {
                    Some(a) => a.absorb(&m),
                    None => acc[i] = Some(m),
                }
            }
        }
        out.extend(acc.into_iter().flatten());
    }
    Ok(out)
}

/// Counts the statements of single acquisitions and releases, one at a time.
async fn round_trips(ctx: &Arc<Ctx>, strategies: &[Strategy]) -> Result<Vec<RoundTrips>, Failure> {
    let mut out = Vec::new();
    for &s in strategies {
        let locker = &ctx.lockers[&s][0];
        let key = format!("{KEY_PREFIX}{}-rt", s.name());
        let (mut acquire, mut release) = (0u64, 0u64);
        for _ in 0..ROUND_TRIP_SAMPLES {
            let a = count::snapshot();
            let guard = locker.try_acquire(&key).await?;
            let b = count::snapshot();
            if let Some(g) = guard {
                g.release().await?;
            }
            let c = count::snapshot();
            acquire += b.since(&a).total();
            release += c.since(&b).total();
        }
        out.push(RoundTrips {
            strategy: s,
            acquire: acquire as f64 / f64::from(ROUND_TRIP_SAMPLES),
            release: release as f64 / f64::from(ROUND_TRIP_SAMPLES),
        });
    }
    Ok(out)
}
