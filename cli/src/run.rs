//! `sqlock run`: a command run while holding a lock (or, with `--limit`, a permit of
//! a semaphore; over several databases, a quorum lock: `acquire.rs` takes either),
//! stopped if it is lost.
//!
//! The lock is taken first (waiting as `--wait`/`--no-wait` say), then the command is
//! started in a process group of its own ([`Tree`]) with the lock's key, owner and
//! fencing token in its environment. While it runs, SIGINT, SIGTERM and SIGHUP are
//! passed on to the whole group, and the guard's lost signal is watched: a lost lock
//! stops the whole group (SIGTERM, then SIGKILL after a grace). When the command ends,
//! what it left running in its group is stopped the same way; the lock is released
//! only after the group is empty, and after `--at-least` if that is later. Should
//! sqlock die without a chance to do any of this, the [`Watcher`] kills the group.
//!
//! `sqlock elect` (`elect.rs`) runs its command under a leadership with the same
//! parts: [`start`], [`supervise`] and [`Signals`].

use std::time::Duration;

use nix::sys::signal::Signal;
use sqlock::{Dialect, LostReason, LostSignal, Strategy};
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use crate::acquire::acquire;
use crate::args::RunArgs;
use crate::failure::Failure;
use crate::held::{Held, Target};
use crate::tree::Tree;
use crate::watcher::Watcher;

/// How long the command's processes have after SIGTERM before SIGKILL, when the lock
/// was lost or the command left processes behind.
const KILL_GRACE: Duration = Duration::from_secs(2);

/// Refuses what the URL's dialect cannot do, before connecting. The library refuses a
/// for-update lock on SQLite too, but as an unsupported server; here it is the user's
/// choice of flag.
pub(crate) fn check(args: &RunArgs, dialect: Dialect) -> Result<(), Failure> {
    // A read-write lock's and a semaphore's names are shorter than a key: their rows'
    // keys hold more than the name. Said as the argument's own message is.
    let name = |what: &str, max: usize, why: &str| {
        Failure::Usage(format!(
            "KEY: {}",
            crate::args::name_too_long(what, args.key.len(), max, why)
        ))
    };
    if (args.shared || args.exclusive) && args.key.len() > sqlock::MAX_RWLOCK_NAME_BYTES {
        return Err(name(
            "a read-write lock's name",
            sqlock::MAX_RWLOCK_NAME_BYTES,
            "its rows' keys add `@write:` and a 36-byte owner id to it",
        ));
    }
    if args.limit.is_some() && args.key.len() > sqlock::MAX_SEMAPHORE_NAME_BYTES {
        return Err(name(
            "a semaphore's name",
            sqlock::MAX_SEMAPHORE_NAME_BYTES,
            "its permits' keys are `semaphore:`, the name, `#` and a slot number",
        ));
    }
    // A semaphore's permits are leases, one per holder.
    if args.limit.is_some() && args.strategy() != Strategy::Lease {
        return Err(Failure::Usage(
            "--limit takes a permit of a semaphore, a lease: it goes with no --strategy \
             but lease"
                .into(),
        ));
    }
    if args.strategy() == Strategy::ForUpdate && dialect == Dialect::Sqlite {
        return Err(Failure::Usage(
            "the for-update strategy needs row locks, which SQLite does not have: use \
             --strategy lease, insert or fair"
                .into(),
        ));
    }
    Ok(())
}

pub(crate) async fn run(target: Target<'_>, args: RunArgs) -> Result<i32, Failure> {
    let mut signals = Signals::new()?;
    // Before the lock: no command runs without a watcher.
    let mut watcher = Watcher::start()?;

    // A signal while waiting gives up the wait: the acquisition is cancel safe, so
    // nothing stays taken. The status is what the signal would have made it.
    let acquiring = acquire(target, &args);
    let guard = tokio::select! {
        guard = acquiring => guard?,
        sig = signals.recv() => return Ok(128 + sig as i32),
    };
    let taken = Instant::now();

    let mut env = guard.env(target, args.limit);
    if args.shared {
        // The read-write lock's name, not the key of this run's read hold.
        env[0].1.clone_from(&args.key);
    }
    let tree = match start(&args.command, &env, &mut watcher).await {
        Ok(tree) => tree,
        Err(failure) => {
            // Nothing runs: give the lock back at once rather than at its expiry.
            let _ = guard.release().await;
            return Err(failure);
        }
    };

    let mut lost = guard.lost();
    let (status, signalled) = match supervise(tree, watcher, &mut lost, &mut signals).await {
        Supervised::Exited { status, signalled } => (status, signalled),
        Supervised::Lost(LostReason::Revoked) => {
            // Revoked: the key stays busy for everyone until it is given back (or its
            // lease lapses). The command's group is gone: give it back now, awaited,
            // since a release left to a dropped guard would never run in a process
            // about to exit.
            let given_back = guard.release().await;
            let back = match given_back {
                Ok(_) => "the lock was given back".to_owned(),
                Err(e) => format!(
                    "the lock could not be given back ({}), and frees at its expiry",
                    Failure::from(e).message()
                ),
            };
            return Err(Failure::Lost(format!(
                "lock {:?} was revoked by an operator (sqlock release --force) while the \
                 command ran; the command and its processes were stopped, and {back}",
                args.key
            )));
        }
        Supervised::Lost(reason) => {
            // No longer ours: this only ends the guard's bookkeeping.
            let _ = guard.release().await;
            return Err(Failure::Lost(format!(
                "lock {:?} was lost while the command ran ({reason}); the command and its \
                 processes were stopped",
                args.key
            )));
        }
    };

    if let Some(at_least) = args.at_least.filter(|_| !signalled) {
        // The lock stays taken until the window is over, so that a job scheduled a
        // little apart on another host does not run again: sqlock stays, renewing. A
        // loss or an operator's signal (then, or earlier) ends the window, and the
        // release below follows at once (documented in the help and README).
        tokio::select! {
            () = tokio::time::sleep_until(taken + at_least) => {}
            _ = lost.wait() => {}
            _ = signals.recv() => {}
        }
    }
    finish(guard, &args.key, status, lost.reason()).await
}

/// How a command run under a lock (or a leadership) ended.
pub(crate) enum Supervised {
    /// The command exited with `status`, and its group is empty; `signalled`: an
    /// operator's signal came meanwhile (it asks sqlock to stop once the command is
    /// over).
    Exited { status: i32, signalled: bool },
    /// The lock was lost: the command's whole group was stopped.
    Lost(LostReason),
}

/// Supervises a started command under `lost`: signals are passed on to its group, a
/// loss stops the whole group (SIGTERM, then SIGKILL after a grace), and once the
/// command exits, what it left running in its group is stopped too. The watcher is
/// dismissed once the group is empty.
pub(crate) async fn supervise(
    mut tree: Tree,
    watcher: Watcher,
    lost: &mut LostSignal,
    signals: &mut Signals,
) -> Supervised {
    let mut signalled = false;
    let status = loop {
        tokio::select! {
            status = tree.wait_command() => break status,
            reason = lost.wait() => {
                tree.stop(KILL_GRACE).await;
                watcher.dismiss().await;
                return Supervised::Lost(reason);
            }
            sig = signals.recv() => {
                signalled = true;
                tree.forward(sig);
            }
        }
    };

    // The command is done; what it left running in its group is not: it ends before
    // the lock is given back. A signal meanwhile still reaches it; a loss only makes
    // the release that follows report it.
    let group = tree.pgid();
    let finishing = tree.finish(KILL_GRACE);
    tokio::pin!(finishing);
    loop {
        tokio::select! {
            () = &mut finishing => break,
            // Straight to the group: the stopping above goes on, its grace unchanged.
            sig = signals.recv() => {
                signalled = true;
                let _ = nix::sys::signal::killpg(group, sig);
                let _ = nix::sys::signal::killpg(group, Signal::SIGCONT);
            }
        }
    }
    watcher.dismiss().await;
    Supervised::Exited { status, signalled }
}

/// Starts the command with `env` added to its environment, and has the watcher watch
/// its group.
pub(crate) async fn start(
    command: &[String],
    env: &[(&str, String)],
    watcher: &mut Watcher,
) -> Result<Tree, Failure> {
    let tree = Tree::spawn(command, env)?;
    // Should this fail, dropping the tree kills the group: nothing runs unwatched.
    watcher.watch(tree.pgid()).await?;
    Ok(tree)
}

/// Releases the lock after the command's group ended. The command's status is the
/// answer, unless the lock turned out lost (`reason`, if the signal had fired) before
/// it was given back.
async fn finish(
    guard: Held,
    key: &str,
    status: i32,
    reason: Option<LostReason>,
) -> Result<i32, Failure> {
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
    if was_lost && reason == Some(LostReason::Revoked) {
        // Revoked while the command was finishing (or during --at-least): the release
        // above gave it back.
        return Err(Failure::Lost(format!(
            "lock {key:?} was revoked by an operator (sqlock release --force) before it \
             could be released; it was given back"
        )));
    }
    if was_lost || !still_ours {
        return Err(Failure::Lost(format!(
            "lock {key:?} was lost before it could be released"
        )));
    }
    Ok(status)
}

/// SIGINT, SIGTERM and SIGHUP, taken over from their default (ending sqlock) while the
/// lock is held or awaited.
pub(crate) struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    pub(crate) fn new() -> Result<Self, Failure> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// The next of them to arrive.
    pub(crate) async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.hangup.recv() => Signal::SIGHUP,
        }
    }
}
