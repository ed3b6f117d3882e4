//! The command's process tree: `sqlock run` starts the command in a process group of
//! its own and answers for every process in that group, not only the one it started.
//!
//! Signals are passed to the whole group, a lost lock stops the whole group, and a run
//! ends only once the group is empty: what the command left running in the background
//! is stopped (SIGTERM, then SIGKILL after a grace) before the lock is given back. On
//! Linux sqlock is a child subreaper, so a group member whose parent died is reparented
//! to sqlock and reaped here rather than by init; elsewhere init reaps it.
//!
//! When standard input is the terminal and sqlock runs in its foreground, the group is
//! made the terminal's foreground while it runs (as a shell does for a job), so an
//! interactive command reads the terminal and gets the keyboard's signals itself; the
//! foreground is given back at the end.
//!
//! What is outside the group is outside the guarantee: a process that moves itself to
//! another process group or session (`setsid`, a daemon's double fork) on purpose.

use std::io::{ErrorKind, IsTerminal};
use std::process::Command;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{killpg, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{getpgrp, tcgetpgrp, tcsetpgrp, Pid};
use tokio::signal::unix::{signal, SignalKind};

use crate::failure::Failure;

/// How often the group is looked at while waiting, besides at every SIGCHLD: a member
/// reaped by init (not a child of ours) sends us no signal when it goes.
const POLL: Duration = Duration::from_millis(50);

/// A command's process group, from its start until it is empty.
#[derive(Debug)]
pub(crate) struct Tree {
    /// The group's id, which is the command's pid: it started the group.
    pgid: Pid,
    /// The command's shell-style status (its exit code, or 128+N for signal N), once
    /// it has been reaped.
    status: Option<i32>,
    /// SIGCHLD, which says a child of ours changed state.
    children: tokio::signal::unix::Signal,
    /// The terminal whose foreground the group was given, to take it back.
    terminal: Option<Terminal>,
    /// Whether the group is known empty; until then, dropping the tree kills it.
    empty: bool,
}

impl Tree {
    /// Starts `command` in a new process group with `env` added to its environment.
    pub(crate) fn spawn(command: &[String], env: &[(&str, String)]) -> Result<Self, Failure> {
        let (program, rest) = command
            .split_first()
            .ok_or_else(|| Failure::Usage("a command to run is required after --".into()))?;
        // Orphans of the group come back to us rather than to init, so that we reap
        // them and can tell when the group is empty. A prctl that cannot fail on a
        // kernel with subreapers (3.4 and later); without it init reaps them instead.
        #[cfg(target_os = "linux")]
        let _ = nix::sys::prctl::set_child_subreaper(true);
        // Registered before the command starts, so that no exit goes unnoticed.
        let children = signal(SignalKind::child())?;
        let mut cmd = Command::new(program);
        cmd.args(rest).envs(env.iter().map(|(k, v)| (k, v)));
        // A group of its own, made in the child before exec: the command and all it
        // starts can be signalled together, and apart from sqlock.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        #[cfg(target_os = "linux")]
        die_with_parent(&mut cmd);
        let child = cmd.spawn().map_err(|e| {
            let text = format!("cannot run {program:?}: {e}");
            match e.kind() {
                ErrorKind::NotFound => Failure::NotFound(text),
                _ => Failure::CannotExecute(text),
            }
        })?;
        let pgid = Pid::from_raw(i32::try_from(child.id()).map_err(|_| {
            Failure::Other(format!("the command's pid {} is out of range", child.id()))
        })?);
        // The `std` handle is dropped without waiting: this tree reaps the whole group
        // itself (`reap`), the command included, and dropping never kills.
        drop(child);
        let terminal = Terminal::hand_over(pgid);
        Ok(Self {
            pgid,
            status: None,
            children,
            terminal,
            empty: false,
        })
    }

    /// The group's id.
    pub(crate) fn pgid(&self) -> Pid {
        self.pgid
    }

    /// Sends `sig` to every process of the group. A group that is gone is no error.
    pub(crate) fn signal(&self, sig: Signal) {
        if !self.empty {
            let _ = killpg(self.pgid, sig);
        }
    }

    /// Passes on a signal sqlock got: SIGTERM and SIGHUP with SIGCONT, as a shell's
    /// `kill` does, so that a stopped member handles it rather than hold the lock
    /// stopped for ever.
    pub(crate) fn forward(&self, sig: Signal) {
        self.signal(sig);
        if matches!(sig, Signal::SIGTERM | Signal::SIGHUP) {
            self.signal(Signal::SIGCONT);
        }
    }

    /// Waits for the command (the process sqlock started) to end, and returns its
    /// shell-style status. Cancel safe: what was reaped is kept.
    pub(crate) async fn wait_command(&mut self) -> i32 {
        loop {
            self.reap();
            if let Some(status) = self.status {
                return status;
            }
            self.next_change().await;
        }
    }

    /// Waits until no process of the group is left. Cancel safe.
    pub(crate) async fn wait_empty(&mut self) {
        loop {
            self.reap();
            // ESRCH: no process has this group id any more. A member that has exited
            // but is not reaped yet still counts; ours are reaped above.
            if self.empty || killpg(self.pgid, None) == Err(Errno::ESRCH) {
                self.empty = true;
                return;
            }
            self.next_change().await;
        }
    }

    /// Stops the whole group: SIGTERM (and SIGCONT, so that a stopped member gets to
    /// handle it), then SIGKILL to what is left after `grace`. Returns once the group
    /// is empty.
    pub(crate) async fn stop(&mut self, grace: Duration) {
        self.signal(Signal::SIGTERM);
        self.signal(Signal::SIGCONT);
        if tokio::time::timeout(grace, self.wait_empty())
            .await
            .is_err()
        {
            self.signal(Signal::SIGKILL);
            self.wait_empty().await;
        }
    }

    /// Ends the run after the command itself ended: what it left running in the group
    /// is stopped as [`stop`](Self::stop) does, and the terminal given back.
    pub(crate) async fn finish(&mut self, grace: Duration) {
        self.reap();
        if killpg(self.pgid, None).is_ok() {
            self.stop(grace).await;
        }
        self.empty = true;
        if let Some(t) = self.terminal.take() {
            t.give_back();
        }
    }

    /// Reaps every exited child of the group (the command, and on Linux the orphans
    /// reparented to sqlock) without waiting, and notes the command's status.
    fn reap(&mut self) {
        loop {
            // A negative pid waits for any child in that process group.
            match waitpid(
                Pid::from_raw(-self.pgid.as_raw()),
                Some(WaitPidFlag::WNOHANG),
            ) {
                Ok(WaitStatus::Exited(pid, code)) => self.note(pid, code),
                Ok(WaitStatus::Signaled(pid, sig, _)) => self.note(pid, 128 + sig as i32),
                Ok(WaitStatus::StillAlive) | Err(_) => return,
                // Stops and continues are not asked for (no WUNTRACED/WCONTINUED).
                Ok(_) => {}
            }
        }
    }

    fn note(&mut self, pid: Pid, status: i32) {
        if pid == self.pgid {
            self.status = Some(status);
        }
    }

    /// The next SIGCHLD, or [`POLL`], whichever comes first.
    async fn next_change(&mut self) {
        let _ = tokio::time::timeout(POLL, self.children.recv()).await;
    }
}

impl Drop for Tree {
    /// A run that ends early (an error, or its future dropped) leaves no process of
    /// the command running without the lock: SIGKILL to the whole group.
    fn drop(&mut self) {
        if !self.empty {
            let _ = killpg(self.pgid, Signal::SIGKILL);
        }
        if let Some(t) = self.terminal.take() {
            t.give_back();
        }
    }
}

/// The controlling terminal on standard input, while the command's group has its
/// foreground.
#[derive(Debug)]
struct Terminal {
    /// sqlock's own group, which had the foreground before.
    ours: Pid,
}

impl Terminal {
    /// Gives the terminal's foreground to `group` when standard input is a terminal
    /// and sqlock is in its foreground; otherwise there is nothing to hand over (cron,
    /// a pipe, a background job).
    fn hand_over(group: Pid) -> Option<Self> {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return None;
        }
        let ours = getpgrp();
        if tcgetpgrp(&stdin).ok()? != ours {
            return None;
        }
        // Changing the foreground from what becomes a background group raises SIGTTOU
        // unless it is blocked: blocked in this thread, which the tool's
        // current-thread runtime runs on, for good.
        let mut ttou = SigSet::empty();
        ttou.add(Signal::SIGTTOU);
        let _ = ttou.thread_block();
        tcsetpgrp(&stdin, group).ok()?;
        // Had the command read the terminal before it was its foreground, it was
        // stopped (SIGTTIN): let it go on, now that it may.
        let _ = killpg(group, Signal::SIGCONT);
        Some(Self { ours })
    }

    fn give_back(self) {
        let _ = tcsetpgrp(std::io::stdin(), self.ours);
    }
}

/// Makes the command get SIGKILL when sqlock dies, however it dies: a parent-death
/// signal (`prctl(PR_SET_PDEATHSIG)`), set in the child between fork and exec. The
/// watcher ([`crate::watcher`]) stops the rest of the group then; this covers the
/// command itself even should the watcher die with sqlock.
///
/// SIGKILL rather than SIGTERM: once sqlock is gone nobody renews the lock, and nobody
/// is left to follow a SIGTERM the command ignores or handles slowly with a SIGKILL
/// before the lease lapses. Only SIGKILL makes sure the command does not run on
/// unprotected.
///
/// The signal is sent when the *thread* that forked ends, not the process. `spawn` is
/// called from `run`, which the tool's current-thread runtime polls on the thread that
/// called `run_with_args` (`block_on`; `run` is never `tokio::spawn`ed, and `spawn` is
/// synchronous, so no blocking-pool thread is involved). In the binary that is the
/// main thread, which lives as long as the process. Should `run` ever move to a
/// multi-threaded runtime or a spawned task, the fork must move to a thread that lives
/// as long as the lock is held.
///
/// The parent-death setting is cleared by exec of a set-user-ID, set-group-ID or
/// file-capability program (`sudo ...`): such a command is covered by the watcher only.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn die_with_parent(command: &mut Command) {
    use nix::sys::prctl::set_pdeathsig;
    use nix::sys::signal::raise;
    use nix::unistd::{getpid, getppid};
    use std::os::unix::process::CommandExt;

    // Taken in sqlock, before the fork.
    let parent = getpid();
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe functions may be called. It calls prctl, getppid and raise
    // (system calls, async-signal-safe), reads a `Pid` copied into it and builds an
    // `io::Error` from a raw errno, which does not allocate. It takes no lock, touches
    // no shared state and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            set_pdeathsig(Signal::SIGKILL)?;
            // sqlock may have died between the fork and the prctl, in which case no
            // signal will come: the child was reparented, so its parent pid changed.
            if getppid() != parent {
                raise(Signal::SIGKILL)?;
            }
            Ok(())
        });
    }
}
