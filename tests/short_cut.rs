//! A network cut shorter than the renewal margin costs no loss.
//!
//! A holder process, in a cgroup of its own, holds a key with the watchdog renewing
//! it; its traffic to or from the server (or both) is cut while at least one renewal
//! surely fails, and healed well before the lease could lapse. Then: the cut's nft
//! rules dropped packets (a cut that dropped nothing proves nothing, and fails the
//! test), a renewal failed, the holder's `lost()` never fired, no other owner could
//! take the key during the cut, and afterwards the holder still holds it with the same
//! fencing token and its release is accepted. On both fault servers, for the lease and
//! insert strategies, in each direction.
//!
//! The cut's length comes from the configured periods. A renewal is sent every
//! [`PERIOD`] and given one period to answer, so a cut of two periods or more holds one
//! renewal from its start to its end: that renewal fails. The holder is cut right
//! after it reports a renewal, so its lease is confirmed until at least one period
//! before the cut plus the TTL; after the heal, the next renewal starts within a period
//! and answers within one. So a cut shorter than the TTL minus three periods keeps the
//! lease with a period to spare, whatever TCP's retransmissions do meanwhile.
//!
//! Runs on the fault tests' own servers (`scripts/fault-db.sh up`), needs root (nft,
//! cgroups). It has a main of its own, like `tests/faults.rs`, because the holder is
//! this binary again, started with `--holder`.

mod common;

use std::process::{ExitCode, Stdio};
use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use common::partition::{Direction, Partitions, CGROUP_ENV, PROBE_ARG};
use common::Backend;
use sqlock::{DbPool, Locker, Strategy};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::postgres::PgPoolOptions;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio::time::{timeout, Instant};

/// The holder's lease TTL.
const TTL: Duration = Duration::from_secs(6);
/// The holder's renewal period, configured: a sixth of the TTL, so that a cut can both
/// outlast two periods and end three periods before the TTL.
const PERIOD: Duration = Duration::from_secs(1);
/// Two periods and a half: every cut holds one whole renewal.
const CUT: Duration = Duration::from_millis(2 * PERIOD.as_millis() as u64 + 500);
/// The longest cut that still keeps the lease with a period to spare.
const MARGIN: Duration = Duration::from_secs(TTL.as_secs() - 3 * PERIOD.as_secs());
const _: () =
    assert!(CUT.as_millis() >= 2 * PERIOD.as_millis() && CUT.as_millis() < MARGIN.as_millis());

const KEY: &str = "held";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        if !args.iter().any(|a| a == "--ignored") {
            println!("a_short_cut_costs_no_loss: test");
        }
        return ExitCode::SUCCESS;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let outcome = match args.get(1).map(String::as_str) {
        Some("--holder") => rt.block_on(holder(&args[2..])),
        Some(PROBE_ARG) => rt.block_on(common::partition::probe(&args[2])),
        _ => rt.block_on(suite()),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("short_cut: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The holder process: `--holder URL TABLE STRATEGY`. It takes [`KEY`] with the
/// watchdog on, prints `HELD token`, a `STATS renewed failed_ticks` line whenever its
/// watchdog's counters move, and `LOST reason` if its lost signal fires; on a
/// `RELEASE` line on stdin it releases, prints `RELEASED true|false`, and ends.
async fn holder(args: &[String]) -> anyhow::Result<()> {
    let [url, table, strategy] = args else {
        anyhow::bail!("holder arguments: {args:?}");
    };
    // Before any connection is opened: a socket belongs to its maker's cgroup.
    let dir = std::env::var_os(CGROUP_ENV).context("the holder's cgroup")?;
    common::partition::join(std::path::Path::new(&dir))?;
    let pool: DbPool = if url.starts_with("postgres") {
        PgPoolOptions::new()
            .max_connections(2)
            .connect(url)
            .await?
            .into()
    } else {
        MySqlPoolOptions::new()
            .max_connections(2)
            .connect(url)
            .await?
            .into()
    };
    let locker = Locker::builder(pool)
        .table(table)
        .strategy(Strategy::from_str(strategy)?)
        .ttl(TTL)
        .renew_interval(PERIOD)
        .build()?;
    let guard = locker
        .try_acquire(KEY)
        .await?
        .context("the key is free at the start")?;
    println!("HELD {}", guard.fencing_token());
    let mut lost = guard.lost();
    tokio::spawn(async move {
        let reason = lost.wait().await;
        println!("LOST {reason:?}");
    });
    let stats = locker.clone();
    tokio::spawn(async move {
        let mut last = None;
        loop {
            let s = stats.watchdog_stats();
            if last != Some((s.renewed, s.failed_ticks)) {
                last = Some((s.renewed, s.failed_ticks));
                println!("STATS {} {}", s.renewed, s.failed_ticks);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = stdin.next_line().await? {
        if line == "RELEASE" {
            println!("RELEASED {}", guard.release().await?);
            return Ok(());
        }
    }
    anyhow::bail!("stdin closed before RELEASE")
}

/// What the holder said.
#[derive(Debug, PartialEq, Eq)]
enum Said {
    Held(i64),
    Stats { renewed: u64, failed: u64 },
    Lost(String),
    Released(bool),
}

fn parse(line: &str) -> Option<Said> {
    let (word, rest) = line.split_once(' ')?;
    Some(match word {
        "HELD" => Said::Held(rest.parse().ok()?),
        "STATS" => {
            let (r, f) = rest.split_once(' ')?;
            Said::Stats {
                renewed: r.parse().ok()?,
                failed: f.parse().ok()?,
            }
        }
        "LOST" => Said::Lost(rest.into()),
        "RELEASED" => Said::Released(rest == "true"),
        _ => return None,
    })
}

/// The holder as the test sees it: what it said so far.
struct Holder {
    child: tokio::process::Child,
    said: mpsc::UnboundedReceiver<Said>,
    renewed: u64,
    failed: u64,
    lost: Option<String>,
}

impl Holder {
    /// The next thing the holder says, keeping count of its stats and of a loss.
    async fn next(&mut self, within: Duration, what: &str) -> anyhow::Result<Said> {
        let said = timeout(within, self.said.recv())
            .await
            .with_context(|| format!("{what}: the holder said nothing for {within:?}"))?
            .with_context(|| format!("{what}: the holder ended"))?;
        match &said {
            Said::Stats { renewed, failed } => {
                self.renewed = *renewed;
                self.failed = *failed;
            }
            Said::Lost(reason) => self.lost = Some(reason.clone()),
            _ => {}
        }
        Ok(said)
    }

    /// Waits until the holder's renewals reach more than `renewed`.
    async fn renewed_past(
        &mut self,
        renewed: u64,
        within: Duration,
        what: &str,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        while self.renewed <= renewed {
            let left = deadline.saturating_duration_since(Instant::now());
            self.next(left, what).await?;
            anyhow::ensure!(self.lost.is_none(), "{what}: false loss: {:?}", self.lost);
        }
        Ok(())
    }
}

/// The lock row's fencing token, read by another connection.
async fn row_token(b: &Backend, pool: &DbPool) -> anyhow::Result<i64> {
    b.scalar(
        pool,
        &format!(
            "SELECT fencing_token FROM {} WHERE lock_key = '{KEY}'",
            b.quoted()
        ),
    )
    .await
}

/// One holder, one cut in `direction`, and everything that must hold after it.
async fn case(
    net: &Partitions,
    b: &Backend,
    strategy: Strategy,
    direction: Direction,
) -> anyhow::Result<String> {
    let what = format!("{} {strategy}, cut {direction}", b.dialect);
    let port = common::port_of(b.url())?;
    let other = b.fresh_table().await?;
    let name = format!("sqlock_sc_{}_{}_{}", b.dialect, strategy, direction.index());
    let dir = net.cgroup(&name)?;
    let mut child = Command::new(std::env::current_exe()?)
        .args(["--holder", b.url(), &b.table, &strategy.to_string()])
        .env(CGROUP_ENV, &dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let (tx, said) = mpsc::unbounded_channel();
    let mut lines = BufReader::new(child.stdout.take().context("holder stdout")?).lines();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(s) = parse(&line) {
                let _ = tx.send(s);
            }
        }
    });
    let mut h = Holder {
        child,
        said,
        renewed: 0,
        failed: 0,
        lost: None,
    };
    let Said::Held(token) = h.next(Duration::from_secs(30), &what).await? else {
        anyhow::bail!("{what}: the holder did not take the key");
    };

    // Cut right after a renewal, so the lease is confirmed for nearly a TTL.
    let renewed = h.renewed;
    h.renewed_past(renewed, TTL, &what).await?;
    let failed_before = h.failed;
    let cut = net.cut(&name, port, direction)?;
    let cut_at = Instant::now();
    // No other owner gets the key while the holder cannot reach the server.
    let taken = other.try_acquire(KEY).await?;
    anyhow::ensure!(
        taken.is_none(),
        "{what}: another owner took the key during the cut"
    );
    tokio::time::sleep(CUT.saturating_sub(cut_at.elapsed())).await;
    let lasted = cut_at.elapsed();
    let dropped = net.heal(cut)?;
    anyhow::ensure!(
        dropped.total() > 0,
        "{what}: the cut dropped no packet, so it tested nothing"
    );
    anyhow::ensure!(
        lasted < MARGIN,
        "{what}: the cut lasted {lasted:?}, past the {MARGIN:?} margin (a stalled machine?)"
    );

    // Renewals resume well before the lease could lapse.
    let at_heal = h.renewed;
    h.renewed_past(at_heal, MARGIN, &what).await?;
    // Whatever it said up to now (a loss included) is in `h`.
    while let Ok(s) = h.said.try_recv() {
        if let Said::Lost(r) = s {
            h.lost = Some(r);
        }
    }
    anyhow::ensure!(
        h.failed > failed_before,
        "{what}: no renewal failed during a {lasted:?} cut of {PERIOD:?} periods"
    );
    anyhow::ensure!(h.lost.is_none(), "{what}: false loss: {:?}", h.lost);
    anyhow::ensure!(
        other.try_acquire(KEY).await?.is_none(),
        "{what}: the key was free after the cut"
    );
    let now_token = row_token(b, other.pool()).await?;
    anyhow::ensure!(
        now_token == token,
        "{what}: the token moved from {token} to {now_token}"
    );
    let stdin = h.child.stdin.as_mut().context("holder stdin")?;
    stdin.write_all(b"RELEASE\n").await?;
    stdin.flush().await?;
    loop {
        match h.next(Duration::from_secs(30), &what).await? {
            Said::Released(true) => break,
            Said::Released(false) => anyhow::bail!("{what}: the holder's release was refused"),
            Said::Lost(r) => anyhow::bail!("{what}: false loss at release: {r}"),
            _ => {}
        }
    }
    let status = timeout(Duration::from_secs(30), h.child.wait()).await??;
    anyhow::ensure!(status.success(), "{what}: the holder failed: {status}");
    let next = other
        .try_acquire(KEY)
        .await?
        .with_context(|| format!("{what}: the key was not free after the release"))?;
    next.release().await?;
    Ok(format!(
        "{what}: cut {lasted:?}, dropped {} packets to the server and {} from it; \
         {} renewals failed, none lost, token {token} kept",
        dropped.to_server,
        dropped.from_server,
        h.failed - failed_before
    ))
}

async fn suite() -> anyhow::Result<()> {
    let servers = common::fault_servers("short_cut").await;
    if servers.is_empty() {
        return Ok(());
    }
    let net = std::sync::Arc::new(Partitions::new()?);
    for b in &servers {
        let name = format!("sqlock_sc_{}_probe", b.dialect);
        let dropped = net
            .calibrate(&name, b.url(), common::port_of(b.url())?)
            .await?;
        println!(
            "{}: a cut of the probe dropped {} packets to the server and {} from it",
            b.dialect, dropped.to_server, dropped.from_server
        );
    }
    // The two servers at once, the cases of each one after the other.
    let mut runs = tokio::task::JoinSet::new();
    for b in servers {
        let net = net.clone();
        runs.spawn(async move {
            let mut b = b;
            for strategy in [Strategy::Lease, Strategy::Insert] {
                for direction in Direction::ALL {
                    b.table = format!("short_cut_{}", strategy.to_string().replace('-', "_"));
                    println!("{}", case(&net, &b, strategy, direction).await?);
                }
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = runs.join_next().await {
        r??;
    }
    println!("short cuts: no loss, on every server, strategy and direction");
    Ok(())
}
