//! Network partitions on loopback: nft rules that drop the packets between one worker
//! process and one fault server, one way or both, and take them away again.
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

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

/// The nft table of the partition rules (`scripts/fault-db.sh` knows it too).
pub const TABLE: &str = "sqlock_fault";

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
}

/// A cut in place: the handles of its rules.
#[derive(Debug)]
pub struct Cut {
    rules: Vec<(&'static str, u64)>,
}

/// The partition rules of one fault run, and the cgroups their workers live in.
#[derive(Debug)]
pub struct Partitions {
    /// Where cgroup v2 is mounted.
    mount: PathBuf,
    /// The same, relative to `/sys/fs/cgroup`, as nft names cgroups.
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
            mount,
            nft_prefix,
            cgroups: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// The directory of cgroup `name` (created when missing), for a worker to move
    /// itself into by writing its pid to `cgroup.procs`.
    pub fn cgroup(&self, name: &str) -> anyhow::Result<PathBuf> {
        let dir = self.mount.join(name);
        if !dir.exists() {
            std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
            self.cgroups.lock().unwrap().push(dir.clone());
        }
        Ok(dir)
    }

    /// Drops the packets between the workers of cgroup `name` and the loopback server
    /// on `port`, in `direction`, until [`Partitions::heal`].
    pub fn cut(&self, name: &str, port: u16, direction: Direction) -> anyhow::Result<Cut> {
        let cgroup = format!("\"{}{name}\"", self.nft_prefix);
        let port = port.to_string();
        let mut rules = Vec::new();
        let mut add = |chain: &'static str, iface: &str, side: &str| -> anyhow::Result<()> {
            let echo = nft(&[
                "-e", "-a", "add", "rule", "inet", TABLE, chain, iface, "lo", "tcp", side, &port,
                "socket", "cgroupv2", "level", "1", &cgroup, "drop",
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
        Ok(Cut { rules })
    }

    /// Takes a cut's rules away. A rule already gone (see [`Partitions::heal_all`]) is
    /// no error.
    pub fn heal(&self, cut: Cut) {
        for (chain, handle) in cut.rules {
            let _ = nft(&[
                "delete",
                "rule",
                "inet",
                TABLE,
                chain,
                "handle",
                &handle.to_string(),
            ]);
        }
    }

    /// Takes every cut away.
    pub fn heal_all(&self) -> anyhow::Result<()> {
        for chain in ["input", "output"] {
            nft(&["flush", "chain", "inet", TABLE, chain])?;
        }
        Ok(())
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
