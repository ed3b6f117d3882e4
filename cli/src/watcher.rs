//! The watcher: a second, tiny sqlock process that stops the command's process group
//! should `sqlock run` die without a chance to do it (SIGKILL, the OOM killer).
//!
//! Nothing runs in a process after SIGKILL, so the one that stops the command's
//! processes then must be another. `sqlock run` starts the watcher (this binary again,
//! with [`WATCH_ARG`]) before it takes the lock, and talks to it through the watcher's
//! standard input: `watch PGID` once the command's group exists, `done` once the group
//! is empty. The kernel closes that pipe when sqlock dies, however it dies; the
//! watcher reads end-of-file without `done`, SIGKILLs the group at once and exits. It
//! sends nothing to the server and holds no lock: it only ever kills the group.
//!
//! The watcher runs in a process group of its own, so that the terminal's signals for
//! sqlock's group (Ctrl-C) do not reach it, and it blocks SIGINT, SIGTERM and SIGHUP,
//! so that one sent to every `sqlock` process by name does not take it away before
//! sqlock has stopped the command. Killing sqlock and the watcher with SIGKILL at the
//! same moment is the one way around it; the command itself still dies then (its
//! parent-death signal, on Linux), the processes it started do not.

use std::io::{BufRead, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{killpg, SigSet, Signal};
use nix::unistd::Pid;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin, Command};

use crate::failure::Failure;

/// The first argument that makes the binary a watcher. Not a subcommand: it is not
/// for users, and takes no options.
pub const WATCH_ARG: &str = "__sqlock-watch";

/// How long the watcher keeps killing a group that is not gone yet: members that fork
/// while the first SIGKILL is on its way are met by the next. Zombies nobody reaps
/// (init is slow, or not reaping at all) would keep the group for ever.
const KILL_FOR: Duration = Duration::from_secs(2);

/// `sqlock run`'s side of the watcher.
#[derive(Debug)]
pub(crate) struct Watcher {
    child: Child,
    stdin: ChildStdin,
}

impl Watcher {
    /// Starts the watcher; it watches nothing until [`watch`](Self::watch).
    pub(crate) fn start() -> Result<Self, Failure> {
        let mut child = Command::new(own_binary())
            // What `ps` and `pkill -f` show: not the user's `sqlock run` line.
            .arg0("sqlock-watch")
            .arg(WATCH_ARG)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            // Should this handle be dropped unanswered, the pipe closes and the
            // watcher does its job: never kill it here.
            .kill_on_drop(false)
            .spawn()
            .map_err(|e| Failure::Other(format!("cannot start sqlock's watcher: {e}")))?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| Failure::Other("BUG: the watcher was started without a pipe".into()))?;
        Ok(Self { child, stdin })
    }

    /// Tells the watcher which group to kill should sqlock die.
    pub(crate) async fn watch(&mut self, pgid: Pid) -> Result<(), Failure> {
        self.say(&format!("watch {pgid}\n"))
            .await
            .map_err(|e| Failure::Other(format!("cannot reach sqlock's watcher: {e}")))
    }

    /// Lets the watcher go: the group is empty, there is nothing left to kill.
    pub(crate) async fn dismiss(mut self) {
        let _ = self.say("done\n").await;
        drop(self.stdin);
        // It exits at once; a watcher that does not is killed rather than waited for.
        if tokio::time::timeout(Duration::from_secs(2), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.start_kill();
        }
    }

    async fn say(&mut self, line: &str) -> std::io::Result<()> {
        self.stdin.write_all(line.as_bytes()).await?;
        self.stdin.flush().await
    }
}

/// This very binary: on Linux through `/proc/self/exe`, which still works when the
/// file was replaced or removed since sqlock started (an upgrade under a long run).
fn own_binary() -> std::path::PathBuf {
    if cfg!(target_os = "linux") {
        "/proc/self/exe".into()
    } else {
        std::env::current_exe().unwrap_or_else(|_| "sqlock".into())
    }
}

/// The watcher process: reads its orders from standard input until `done` (exit
/// quietly) or end-of-file (kill the group it was told of). Returns the exit status.
pub(crate) fn main() -> i32 {
    // The name `ps`, `top` and `killall` show (exec of /proc/self/exe would show
    // "exe"); `killall sqlock` then leaves the watcher alone.
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_name(c"sqlock-watch");
    let mut quiet = SigSet::empty();
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        quiet.add(sig);
    }
    // This process starts no other, so a blocked signal stays blocked for nobody else.
    let _ = quiet.thread_block();
    let mut group = None;
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        match line.split_once(' ') {
            Some(("watch", pgid)) => group = pgid.trim().parse::<i32>().ok().map(Pid::from_raw),
            _ if line == "done" => return 0,
            _ => {}
        }
    }
    // sqlock is gone without saying `done`: nobody renews its lock any more.
    if let Some(pgid) = group {
        kill_group(pgid);
    }
    0
}

/// SIGKILLs every process of `pgid`, and again until the group is gone, for
/// [`KILL_FOR`] at most.
fn kill_group(pgid: Pid) {
    if killpg(pgid, Signal::SIGKILL) == Err(Errno::ESRCH) {
        return; // nothing was left running
    }
    let _ = writeln!(
        std::io::stderr(),
        "sqlock: sqlock run ended without stopping its command; its process group {pgid} \
         was killed"
    );
    let started = Instant::now();
    while started.elapsed() < KILL_FOR && killpg(pgid, Signal::SIGKILL) != Err(Errno::ESRCH) {
        std::thread::sleep(Duration::from_millis(10));
    }
}
