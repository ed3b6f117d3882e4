//! `sqlock run`: a command run while holding a lock, stopped if the lock is lost.
//!
//! The lock is taken first (waiting as `--wait`/`--no-wait` say), then the command is
//! started with the lock's key, owner and fencing token in its environment. While it
//! runs, SIGINT and SIGTERM are passed on to it, and the guard's lost signal is
//! watched: a lost lock stops the command (SIGTERM, then SIGKILL after a grace). The
//! lock is released after the command ended, or after `--at-least` if that is later.

use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use sqlock::{Dialect, LockGuard, Locker, Strategy};
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use crate::args::RunArgs;
use crate::Failure;

/// How long a command told to stop (SIGTERM) after a lost lock has before SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);

/// Refuses what the URL's dialect cannot do, before connecting. The library refuses a
/// for-update lock on SQLite too, but as an unsupported server; here it is the user's
/// choice of flag.
pub(crate) fn check(args: &RunArgs, dialect: Dialect) -> Result<(), Failure> {
    if args.strategy == Strategy::ForUpdate && dialect == Dialect::Sqlite {
        return Err(Failure::Usage(
            "the for-update strategy needs row locks, which SQLite does not have: use \
             --strategy lease or insert"
                .into(),
        ));
    }
    Ok(())
}

pub(crate) async fn run(locker: &Locker, args: RunArgs) -> Result<i32, Failure> {
    let mut signals = Signals::new()?;

    // A signal while waiting gives up the wait: the acquisition is cancel safe, so
    // nothing stays taken. The status is what the signal would have made it.
    let guard = tokio::select! {
        guard = acquire(locker, &args) => guard?,
        sig = signals.recv() => return Ok(128 + sig as i32),
    };
    let taken = Instant::now();

    let mut child = match spawn(&args.command, &guard) {
        Ok(child) => child,
        Err(failure) => {
            // Nothing ran: give the lock back at once rather than at its expiry.
            let _ = guard.release().await;
            return Err(failure);
        }
    };

    let mut lost = guard.lost();
    let status = loop {
        tokio::select! {
            status = child.wait() => break status?,
            reason = lost.wait() => {
                stop(&mut child).await;
                // No longer ours: this only ends the guard's bookkeeping.
                let _ = guard.release().await;
                return Err(Failure::Lost(format!(
                    "lock {:?} was lost while the command ran ({reason}); the command was stopped",
                    args.key
                )));
            }
            // A SIGINT typed at a terminal reaches the command directly too (same
            // process group), so it may see two: harmless for the usual handlers, and
            // a signal sent to sqlock alone must reach it.
            sig = signals.recv() => forward(&child, sig),
        }
    };

    if let Some(at_least) = args.at_least {
        // The lock stays taken until the window is over, so that a job scheduled a
        // little apart on another host does not run again. A loss or an operator's
        // signal ends the window early.
        tokio::select! {
            () = tokio::time::sleep_until(taken + at_least) => {}
            _ = lost.wait() => {}
            _ = signals.recv() => {}
        }
    }
    finish(guard, &args.key, status).await
}

/// Takes the lock as `--wait` and `--no-wait` say.
async fn acquire(locker: &Locker, args: &RunArgs) -> Result<LockGuard, Failure> {
    let request = locker.lock(&args.key).ttl(args.ttl).strategy(args.strategy);
    let busy = || Failure::NotAcquired(format!("lock {:?} is held elsewhere", args.key));
    match args.wait {
        // A deadline shorter than a round trip would always time out (see
        // `acquire_timeout`): a zero wait means one attempt.
        _ if args.no_wait => request.try_acquire().await?.ok_or_else(busy),
        Some(wait) if wait.is_zero() => request.try_acquire().await?.ok_or_else(busy),
        Some(wait) => Ok(request.acquire_timeout(wait).await?),
        None => Ok(request.acquire().await?),
    }
}

/// Starts the command with the lock's identity in its environment.
fn spawn(command: &[String], guard: &LockGuard) -> Result<Child, Failure> {
    let (program, rest) = command
        .split_first()
        .ok_or_else(|| Failure::Usage("a command to run is required after --".into()))?;
    let mut command = Command::new(program);
    command
        .args(rest)
        .env("SQLOCK_KEY", guard.key())
        .env("SQLOCK_OWNER", guard.owner().to_string())
        .env("SQLOCK_FENCING_TOKEN", guard.fencing_token().to_string())
        // Should sqlock fail while waiting for it, the command must not run on
        // without the lock.
        .kill_on_drop(true);
    // Nor should it when sqlock dies without a chance to stop it (SIGKILL, the OOM
    // killer), on Linux. Elsewhere the command runs on, as documented.
    #[cfg(target_os = "linux")]
    die_with_parent(&mut command);
    command.spawn().map_err(|e| {
        let text = format!("cannot run {program:?}: {e}");
        match e.kind() {
            ErrorKind::NotFound => Failure::NotFound(text),
            _ => Failure::CannotExecute(text),
        }
    })
}

/// Makes the command get SIGKILL when sqlock dies, however it dies: a parent-death
/// signal (`prctl(PR_SET_PDEATHSIG)`), set in the child between fork and exec.
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
/// main thread, which lives as long as the process. Called from another thread, that
/// thread still lives until `run` returned, and `run` only returns after the command
/// ended or was killed (`kill_on_drop`), so the signal never fires while the lock is
/// held for a running command. Should `run` ever move to a multi-threaded runtime or
/// a spawned task, the fork must move to a thread that lives as long as the lock is
/// held.
///
/// The parent-death setting is cleared by exec of a set-user-ID, set-group-ID or
/// file-capability program (`sudo ...`): such a command is not covered. Neither are
/// processes the command starts itself, as with the other signals sqlock sends.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn die_with_parent(command: &mut Command) {
    use nix::sys::prctl::set_pdeathsig;
    use nix::sys::signal::raise;
    use nix::unistd::{getpid, getppid};

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

/// Releases the lock after the command ended. The command's status is the answer,
/// unless the lock turned out lost before it was given back.
async fn finish(guard: LockGuard, key: &str, status: ExitStatus) -> Result<i32, Failure> {
    let was_lost = guard.is_lost();
    let still_ours = match guard.release().await {
        Ok(still_ours) => still_ours,
        Err(e) => {
            // The renewals vouched for the lock while the command ran (or the lost
            // signal would have fired): only the release is missing.
            eprintln!(
                "sqlock: could not release lock {key:?}, it lapses at its expiry: {}",
                Failure::from(e).message()
            );
            true
        }
    };
    if was_lost || !still_ours {
        return Err(Failure::Lost(format!(
            "lock {key:?} was lost before it could be released"
        )));
    }
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        // Neither exited nor signalled: not a status a waited-for child has on Unix.
        (None, None) => crate::EXIT_SOFTWARE,
    })
}

/// SIGINT and SIGTERM, taken over from their default (ending sqlock) while the lock
/// is held or awaited.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Self, Failure> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    /// The next of them to arrive.
    async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
        }
    }
}

fn forward(child: &Child, sig: Signal) {
    // `id` is `None` once the child was reaped, so a recycled pid is never signalled.
    if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) {
        // It may have exited in between (ESRCH): nothing to do then.
        let _ = kill(Pid::from_raw(pid), sig);
    }
}

/// SIGTERM, then SIGKILL after [`KILL_GRACE`].
async fn stop(child: &mut Child) {
    forward(child, Signal::SIGTERM);
    if tokio::time::timeout(KILL_GRACE, child.wait())
        .await
        .is_err()
    {
        forward(child, Signal::SIGKILL);
        let _ = child.wait().await;
    }
}
