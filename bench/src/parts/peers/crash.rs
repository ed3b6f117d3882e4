//! Crash recovery: a holder process killed with SIGKILL while a waiter waits; the time
//! from the kill to the waiter's grant, for every contender, in rounds that alternate
//! them.
//!
//! The holder is this same binary run again as a hidden subcommand (`__hold`): it
//! takes the lock, says `held` on stdout and waits until it is killed (or its stdin
//! closes, should the run end first).

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sqlock::{LockerBuilder, Strategy, TableName};

use super::setup::{alternate, key, slug, Setup};
use crate::args::HoldArgs;
use crate::failure::Failure;
use crate::figures::{Contender, PeerCrash};
use crate::peers::{PeerPools, PeerWorker};
use crate::stats::Samples;

/// A sqlock contender of the crash part, described by its builder options.
pub(crate) struct SqlockVariant {
    /// Its name in the tables (`sqlock <name>`) and on the holder's command line.
    pub(crate) name: &'static str,
    /// The builder options that make it, given `--crash-ttl`.
    pub(crate) options: fn(LockerBuilder, Duration) -> LockerBuilder,
    /// What frees a dead holder's lock, given the TTL.
    pub(crate) freed_by: fn(Duration) -> String,
    /// A TTL of its own instead of `--crash-ttl`: presence frees a dead holder's lease
    /// without waiting for its TTL, so those variants keep the library's default of
    /// 30 s, as a user would, and a grant before it shows presence at work.
    pub(crate) ttl: Option<Duration>,
}

/// The lease TTL of a sqlock variant with a TTL of its own (the library's default).
const DEFAULT_TTL: Duration = sqlock::DEFAULT_TTL;

/// The sqlock contenders of the crash part. The holder and the waiter are built from
/// the same line, so another variant is one line more here.
pub(crate) const SQLOCK_VARIANTS: &[SqlockVariant] = &[
    SqlockVariant {
        name: "lease",
        options: |b, ttl| b.strategy(Strategy::Lease).ttl(ttl),
        freed_by: |ttl| format!("the lease's TTL, {}", humantime::format_duration(ttl)),
        ttl: None,
    },
    SqlockVariant {
        name: "for-update",
        options: |b, _| b.strategy(Strategy::ForUpdate),
        freed_by: |_| "the server ending the dead session's transaction".into(),
        ttl: None,
    },
    // A waiter learns of a dead holder's presence when the server frees its marker
    // (it waits in the server for it, `server_waits`, on by default), or at its next
    // attempt where it cannot: the default polls at most every 500 ms, the second
    // variant every 10 ms at most.
    SqlockVariant {
        name: "lease, presence",
        options: |b, ttl| b.strategy(Strategy::Lease).ttl(ttl).presence(true),
        freed_by: |ttl| {
            format!(
                "the dead holder's presence session (TTL {}); default polling",
                humantime::format_duration(ttl)
            )
        },
        ttl: Some(DEFAULT_TTL),
    },
    SqlockVariant {
        name: "lease, presence, poll <= 10ms",
        options: |b, ttl| {
            b.strategy(Strategy::Lease)
                .ttl(ttl)
                .presence(true)
                .poll_interval(Duration::from_millis(1), Duration::from_millis(10))
        },
        freed_by: |ttl| {
            format!(
                "the dead holder's presence session (TTL {})",
                humantime::format_duration(ttl)
            )
        },
        ttl: Some(DEFAULT_TTL),
    },
    // The fair lock: the first waiter waits in the server for the holder's marker
    // between its polls, as a lease waiter does.
    SqlockVariant {
        name: "fair, presence",
        options: |b, ttl| b.strategy(Strategy::Fair).ttl(ttl).presence(true),
        freed_by: |ttl| {
            format!(
                "the dead holder's presence session (TTL {}); default polling",
                humantime::format_duration(ttl)
            )
        },
        ttl: Some(DEFAULT_TTL),
    },
];

/// How long the waiter waits before the holder is killed, so that it is waiting.
const SETTLE: Duration = Duration::from_millis(300);
/// How long a holder may take to start and take the lock.
const START_LIMIT: Duration = Duration::from_secs(30);
/// How long a waiter may wait after the kill, beyond `--crash-ttl`.
const WAIT_LIMIT: Duration = Duration::from_secs(15);
/// The longest a holder holds if nobody kills it.
const HOLD_LIMIT: Duration = Duration::from_secs(300);

/// The contenders of the crash part: the library's variants, then the peers.
fn contenders(s: &Setup<'_>) -> Vec<Contender> {
    let mut out: Vec<Contender> = SQLOCK_VARIANTS
        .iter()
        .map(|v| Contender::Sqlock(v.name))
        .collect();
    out.extend(s.peers());
    out
}

/// The lease TTL a contender's trials use: its own, or `--crash-ttl`.
fn ttl_for(who: Contender, crash_ttl: Duration) -> Duration {
    match who {
        Contender::Sqlock(name) => SQLOCK_VARIANTS
            .iter()
            .find(|v| v.name == name)
            .and_then(|v| v.ttl)
            .unwrap_or(crash_ttl),
        _ => crash_ttl,
    }
}

/// What frees a dead holder's lock, for the tables.
fn freed_by(who: Contender, ttl: Duration) -> String {
    match who {
        Contender::Sqlock(name) => SQLOCK_VARIANTS
            .iter()
            .find(|v| v.name == name)
            .map_or_else(String::new, |v| (v.freed_by)(ttl)),
        _ => "the server ending the dead session".into(),
    }
}

/// A worker of the contender named `name` (a variant's name or a peer's slug).
fn worker(
    name: &str,
    builder: LockerBuilder,
    ttl: Duration,
    pools: &PeerPools,
) -> Result<PeerWorker, Failure> {
    if let Some(v) = SQLOCK_VARIANTS.iter().find(|v| v.name == name) {
        return Ok(PeerWorker::sqlock(&(v.options)(builder, ttl).build()?));
    }
    [
        Contender::Advisory,
        Contender::GetLock,
        Contender::DistributedLock,
    ]
    .into_iter()
    .find(|&c| slug(c) == name)
    .and_then(|c| PeerWorker::peer(c, pools))
    .ok_or_else(|| Failure::Usage(format!("no contender {name:?} on this database")))
}

/// Every contender, `--crashes` times, in rounds that alternate them.
pub(super) async fn crash(s: &Setup<'_>) -> Result<Vec<PeerCrash>, Failure> {
    let ttl = s.args.crash_ttl;
    let contenders = contenders(s);
    let mut acc: Vec<Samples> = vec![Samples::default(); contenders.len()];
    for round in 0..s.args.crashes {
        s.progress.note(&format!(
            "peers: crash recovery, round {}/{}",
            round + 1,
            s.args.crashes
        ));
        for i in alternate(contenders.len(), round) {
            acc[i].push(trial(s, contenders[i], ttl_for(contenders[i], ttl)).await?);
        }
    }
    Ok(contenders
        .into_iter()
        .zip(acc)
        .map(|(who, recovery)| PeerCrash {
            who,
            freed_by: freed_by(who, ttl_for(who, ttl)),
            recovery,
        })
        .collect())
}

/// Kills the holder however this ends.
struct Holder(Child);

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One holder started, a waiter waiting, the holder killed: kill to grant.
async fn trial(s: &Setup<'_>, who: Contender, ttl: Duration) -> Result<Duration, Failure> {
    let key = key(who, "crash", 0);
    let exe = std::env::current_exe()
        .map_err(|e| Failure::Other(format!("cannot find this program to rerun: {e}")))?;
    let mut child = Command::new(exe)
        .arg("--database-url")
        .arg(s.url)
        .arg("--table")
        .arg(s.table.as_str())
        .arg("__hold")
        .arg("--contender")
        .arg(slug(who))
        .arg("--key")
        .arg(&key)
        .arg("--ttl")
        .arg(humantime::format_duration(ttl).to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| Failure::Other(format!("cannot start a holder: {e}")))?;
    let stdout = child.stdout.take();
    let mut holder = Holder(child);
    let said = tokio::time::timeout(
        START_LIMIT,
        tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            if let Some(out) = stdout {
                let _ = BufReader::new(out).read_line(&mut line);
            }
            line
        }),
    )
    .await;
    if !matches!(&said, Ok(Ok(line)) if line.trim() == "held") {
        return Err(Failure::Other(format!(
            "the holder of {} did not take the lock",
            who.label(s.db.dialect())
        )));
    }
    let mut waiter = worker(slug(who), s.builder(), ttl, &s.pools)?;
    let wait_key = key.clone();
    let waiting = tokio::spawn(async move {
        let got = waiter.acquire(&wait_key, ttl + WAIT_LIMIT).await;
        (got, Instant::now(), waiter)
    });
    tokio::time::sleep(SETTLE).await;
    if waiting.is_finished() {
        return Err(Failure::Other(format!(
            "{}: a waiter got the lock while its holder held it",
            who.label(s.db.dialect())
        )));
    }
    let killed = Instant::now();
    holder
        .0
        .kill()
        .map_err(|e| Failure::Other(format!("cannot kill the holder: {e}")))?;
    let (got, granted, mut waiter) = waiting
        .await
        .map_err(|e| Failure::Other(format!("a waiter failed: {e}")))?;
    if !got? {
        return Err(Failure::Other(format!(
            "{}: not granted within {:?} of the holder's kill",
            who.label(s.db.dialect()),
            ttl + WAIT_LIMIT
        )));
    }
    waiter.release(&key).await?;
    tokio::task::spawn_blocking(move || drop(holder))
        .await
        .map_err(|e| Failure::Other(format!("cannot reap the holder: {e}")))?;
    Ok(granted.saturating_duration_since(killed))
}

/// The hidden `__hold` subcommand: takes the lock as `h` says, says `held` on stdout,
/// and holds it until killed, until its stdin closes, or for at most five minutes.
pub(crate) async fn hold(url: &str, table: &TableName, h: &HoldArgs) -> Result<(), Failure> {
    let db = crate::connect::connect(url, 4).await?;
    let pools = PeerPools::connect(&db, url, 2).await?;
    let builder = sqlock::Locker::builder(db.clone()).table(table.as_str());
    let mut w = worker(&h.contender, builder, h.ttl, &pools)?;
    if !w.acquire(&h.key, START_LIMIT).await? {
        return Err(Failure::Other(format!("could not take {:?}", h.key)));
    }
    println!("held");
    let stdin_closed = tokio::task::spawn_blocking(|| {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
    });
    let _ = tokio::time::timeout(HOLD_LIMIT, stdin_closed).await;
    w.release(&h.key).await
}
