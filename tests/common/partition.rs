//! Network partitions on loopback: nft rules that drop the packets between one worker
//! process and one fault server, one way or both, take them away again, and say how
//! many packets each rule dropped.
//!
//! A worker is matched by a cgroup of its own (it moves itself there before it opens a
//! connection, so every socket it makes belongs to that cgroup), and every rule also
//! names the loopback interface and the server's port. No other traffic of the machine
//! is touched: not the other workers, not the driver's own connections, not the main
//! servers. The rules live in one nft table, `inet sqlock_fault`, which is deleted when
//! the [`Partitions`] is dropped and by `scripts/fault-db.sh up`.
//!
//! Both hooks are needed for a cut both ways: on loopback a packet from the worker to
//! the server leaves through `output` carrying the worker's socket, and a packet from
//! the server arrives through `input`, where the socket it is delivered to is the
//! worker's.
//!
//! A rule that matches nothing drops nothing, silently: a wrong cgroup level (the
//! kernel counts levels from the root of the whole hierarchy) would turn every cut
//! into a no-op. So each rule carries a counter, which [`Partitions::heal`] reads
//! before it deletes the rule, and [`Partitions::calibrate`] shows, before a test
//! relies on cuts, that a cut of a probe process drops its packets each way.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncBufReadExt, BufReader};

/// The nft table of the partition rules (`scripts/fault-db.sh` knows it too).
pub const TABLE: &str = "sqlock_fault";

/// The first argument that makes a test binary the probe of [`Partitions::calibrate`]
/// (see [`probe`]); its main hands such a run to [`probe`].
pub const PROBE_ARG: &str = "--cut-probe";

/// The cgroup directory a probe or worker moves itself into.
pub const CGROUP_ENV: &str = "SQLOCK_FAULT_CGROUP";

/// How long [`Partitions::calibrate`] waits for a cut to drop a probe's packet. The
/// probe sends a query every 20 ms and TCP retransmits within a second and a half, so
/// this only bounds a run where the rule matches nothing.
const PROBE_PATIENCE: Duration = Duration::from_secs(15);

/// Which packets a cut drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// The worker's requests are lost; the server hears nothing.
    ToServer,
    /// The server's answers are lost; the server acts on requests it cannot answer.
    FromServer,
    /// Both.
    Both,
}

impl Direction {
    pub const ALL: [Direction; 3] = [Self::ToServer, Self::FromServer, Self::Both];

    /// The index of the direction in [`Direction::ALL`].
    pub fn index(self) -> usize {
        match self {
            Self::ToServer => 0,
            Self::FromServer => 1,
            Self::Both => 2,
        }
    }
}

impl std::fmt::Display for Direction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::ToServer => "to the server",
            Self::FromServer => "from the server",
            Self::Both => "both ways",
        })
    }
}

/// A cut in place: the handles of its rules.
#[derive(Debug)]
pub struct Cut {
    pub direction: Direction,
    /// `output` carries the packets to the server, `input` those from it.
    rules: Vec<(&'static str, u64)>,
}

/// What the rules of one cut dropped, in packets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dropped {
    pub to_server: u64,
    pub from_server: u64,
}

impl Dropped {
    pub fn total(self) -> u64 {
        self.to_server + self.from_server
    }
}

/// The partition rules of one fault run, and the cgroups their workers live in.
#[derive(Debug)]
pub struct Partitions {
    /// The cgroup the workers' cgroups are made in: this process's own.
    base: PathBuf,
    /// The same, relative to the cgroup v2 mount ("" for its root).
    base_rel: PathBuf,
    /// The mount, relative to `/sys/fs/cgroup`, as nft names cgroups ("" or "x/").
    nft_prefix: String,
    cgroups: std::sync::Mutex<Vec<PathBuf>>,
}

fn nft(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("nft")
        .args(args)
        .output()
        .context("nft (Debian's nftables; scripts/fault-db.sh installs it)")?;
    anyhow::ensure!(
        out.status.success(),
        "nft {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The cgroup v2 mount point, which nft resolves cgroup paths against when it is
/// `/sys/fs/cgroup` or below it.
fn cgroup2_mount() -> anyhow::Result<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts")?;
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let (_, at, kind) = (f.next()?, f.next()?, f.next()?);
            (kind == "cgroup2").then(|| PathBuf::from(at))
        })
        .find(|at| at.starts_with("/sys/fs/cgroup"))
        .context("cgroup v2 is not mounted under /sys/fs/cgroup")
}

/// This process's cgroup v2, relative to the mount (the `0::` line of
/// `/proc/self/cgroup`, without its leading `/`).
fn own_cgroup() -> anyhow::Result<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup")?;
    let path = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .context("no cgroup v2 line in /proc/self/cgroup")?;
    Ok(PathBuf::from(path.trim().trim_start_matches('/')))
}

/// The packet count of the rule `handle` in a listing of its chain (`nft -a list
/// chain`), whose lines end `counter packets N bytes M drop # handle H`.
fn packets_in(listing: &str, handle: u64) -> Option<u64> {
    listing.lines().find_map(|line| {
        let (rule, h) = line.rsplit_once("# handle ")?;
        if h.trim().parse::<u64>().ok()? != handle {
            return None;
        }
        let mut words = rule.split_whitespace();
        words.find(|w| *w == "packets")?;
        words.next()?.parse().ok()
    })
}

impl Partitions {
    /// Creates the rule table, empty. Needs root (nft, cgroups).
    pub fn new() -> anyhow::Result<Self> {
        let mount = cgroup2_mount()?;
        let rel = mount.strip_prefix("/sys/fs/cgroup")?;
        let nft_prefix = if rel.as_os_str().is_empty() {
            String::new()
        } else {
            format!("{}/", rel.display())
        };
        let base_rel = own_cgroup()?;
        let _ = nft(&["delete", "table", "inet", TABLE]);
        nft(&["add", "table", "inet", TABLE])?;
        for (chain, hook) in [("input", "input"), ("output", "output")] {
            nft(&[
                "add",
                "chain",
                "inet",
                TABLE,
                chain,
                &format!("{{ type filter hook {hook} priority -10; }}"),
            ])?;
        }
        Ok(Self {
            base: mount.join(&base_rel),
            base_rel,
            nft_prefix,
            cgroups: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// The directory of cgroup `name` (created when missing), for a worker to move
    /// itself into by writing its pid to `cgroup.procs`. It is made inside this
    /// process's own cgroup, wherever that is in the hierarchy.
    pub fn cgroup(&self, name: &str) -> anyhow::Result<PathBuf> {
        let dir = self.base.join(name);
        if !dir.exists() {
            std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
            self.cgroups.lock().unwrap().push(dir.clone());
        }
        Ok(dir)
    }

    /// The level nft matches cgroup `name` at: its depth below the root of the
    /// hierarchy, one per path component (a cgroup made in the root is at level 1).
    pub fn level(&self, name: &str) -> usize {
        self.base_rel.join(name).components().count()
    }

    /// Drops the packets between the workers of cgroup `name` and the loopback server
    /// on `port`, in `direction`, until [`Partitions::heal`].
    pub fn cut(&self, name: &str, port: u16, direction: Direction) -> anyhow::Result<Cut> {
        let path = self.base_rel.join(name);
        let cgroup = format!("\"{}{}\"", self.nft_prefix, path.display());
        let level = self.level(name).to_string();
        let port = port.to_string();
        let mut rules = Vec::new();
        let mut add = |chain: &'static str, iface: &str, side: &str| -> anyhow::Result<()> {
            let echo = nft(&[
                "-e", "-a", "add", "rule", "inet", TABLE, chain, iface, "lo", "tcp", side, &port,
                "socket", "cgroupv2", "level", &level, &cgroup, "counter", "drop",
            ])?;
            let handle = echo
                .split("# handle ")
                .nth(1)
                .and_then(|h| h.split_whitespace().next())
                .and_then(|h| h.parse().ok())
                .with_context(|| format!("no rule handle in {echo:?}"))?;
            rules.push((chain, handle));
            Ok(())
        };
        if direction != Direction::FromServer {
            add("output", "oifname", "dport")?;
        }
        if direction != Direction::ToServer {
            add("input", "iifname", "sport")?;
        }
        Ok(Cut { direction, rules })
    }

    /// What a cut's rules have dropped so far. A rule that is gone (taken away by
    /// [`Partitions::heal_all`]) is an error: its count is lost.
    pub fn dropped(&self, cut: &Cut) -> anyhow::Result<Dropped> {
        let mut dropped = Dropped::default();
        for &(chain, handle) in &cut.rules {
            let listing = nft(&["-a", "list", "chain", "inet", TABLE, chain])?;
            let n = packets_in(&listing, handle)
                .with_context(|| format!("no counter for rule {handle} of chain {chain}"))?;
            match chain {
                "output" => dropped.to_server = n,
                _ => dropped.from_server = n,
            }
        }
        Ok(dropped)
    }

    /// Takes a cut's rules away, and says how many packets they dropped (read just
    /// before the rules go).
    pub fn heal(&self, cut: Cut) -> anyhow::Result<Dropped> {
        let dropped = self.dropped(&cut);
        for (chain, handle) in cut.rules {
            nft(&[
                "delete",
                "rule",
                "inet",
                TABLE,
                chain,
                "handle",
                &handle.to_string(),
            ])?;
        }
        dropped
    }

    /// Takes every cut away, without reading what they dropped.
    pub fn heal_all(&self) -> anyhow::Result<()> {
        for chain in ["input", "output"] {
            nft(&["flush", "chain", "inet", TABLE, chain])?;
        }
        Ok(())
    }

    /// Shows that cuts of cgroup `name` work: a probe process in that cgroup queries
    /// the server at `url` (loopback, `port`) without pause, and a cut of it to the
    /// server, then one from the server, must each drop packets. Fails, saying why it
    /// may be, when one drops none. Returns what the two cuts dropped.
    pub async fn calibrate(&self, name: &str, url: &str, port: u16) -> anyhow::Result<Dropped> {
        let dir = self.cgroup(name)?;
        let mut probe = tokio::process::Command::new(std::env::current_exe()?)
            .args([PROBE_ARG, url])
            .env(CGROUP_ENV, &dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let mut lines = BufReader::new(probe.stdout.take().context("probe stdout")?).lines();
        let ready = tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await;
        anyhow::ensure!(
            matches!(&ready, Ok(Ok(Some(l))) if l == "READY"),
            "the cut probe for {url} did not start: {ready:?}"
        );
        let mut total = Dropped::default();
        for direction in [Direction::ToServer, Direction::FromServer] {
            let cut = self.cut(name, port, direction)?;
            let started = tokio::time::Instant::now();
            while self.dropped(&cut)?.total() == 0 && started.elapsed() < PROBE_PATIENCE {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let dropped = self.heal(cut)?;
            anyhow::ensure!(
                dropped.total() > 0,
                "a cut {direction} of port {port} dropped no packet of a probe that queried \
                 the server all along ({PROBE_PATIENCE:?}): the rule matches no socket. It \
                 names cgroup {} at level {}, counted from the cgroup v2 mount; in a cgroup \
                 namespace (a container) the kernel counts levels from the host's root, so \
                 the level is off by the namespace's depth",
                dir.display(),
                self.level(name)
            );
            total.to_server += dropped.to_server;
            total.from_server += dropped.from_server;
        }
        let _ = probe.start_kill();
        let _ = probe.wait().await;
        Ok(total)
    }
}

impl Drop for Partitions {
    fn drop(&mut self) {
        let _ = nft(&["delete", "table", "inet", TABLE]);
        // Empty once their workers have exited; one still in use stays, harmlessly.
        for dir in self.cgroups.lock().unwrap().drain(..) {
            let _ = std::fs::remove_dir(&dir);
        }
    }
}

/// Moves this process into the cgroup at `dir`, with all its threads.
pub fn join(dir: &Path) -> anyhow::Result<()> {
    std::fs::write(dir.join("cgroup.procs"), std::process::id().to_string())
        .with_context(|| format!("joining cgroup {}", dir.display()))
}

/// The probe of [`Partitions::calibrate`], run as `<test binary> --cut-probe URL`: it
/// moves into the cgroup `SQLOCK_FAULT_CGROUP` names, connects to the server at URL,
/// prints `READY`, and then queries it every 20 ms (each query given 500 ms) until it
/// is killed.
pub async fn probe(url: &str) -> anyhow::Result<()> {
    let dir = std::env::var_os(CGROUP_ENV).context("the probe's cgroup")?;
    join(Path::new(&dir))?;
    let timeout = Duration::from_millis(500);
    macro_rules! run {
        ($pool:expr) => {{
            let pool = $pool
                .max_connections(2)
                .acquire_timeout(timeout)
                .connect(url)
                .await?;
            sqlx::query("SELECT 1").execute(&pool).await?;
            println!("READY");
            loop {
                let _ = tokio::time::timeout(timeout, sqlx::query("SELECT 1").execute(&pool)).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }};
    }
    if url.starts_with("postgres") {
        run!(sqlx::postgres::PgPoolOptions::new())
    } else {
        run!(sqlx::mysql::MySqlPoolOptions::new())
    }
}
