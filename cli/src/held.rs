//! What `run` holds while its command runs, and where it took it from: a lock, a
//! permit, or a quorum lock, each ended the same way (released once the command's group
//! is empty, lost when their lease is), so that `run` supervises any of them alike.

use sqlock::{LockGuard, Locker, LostSignal, QuorumGuard, SemaphoreGuard};

/// What a run takes its lock from: one database's handle, or a quorum of several
/// (`--database-url` three times or more: `quorum.rs`).
#[derive(Clone, Copy)]
pub(crate) enum Target<'a> {
    Locker(&'a Locker),
    Quorum(&'a sqlock::Quorum),
}

/// What `run` holds while its command runs.
pub(crate) enum Held {
    /// The lock on KEY.
    Lock(LockGuard),
    /// A permit of the semaphore KEY (`--limit`).
    Permit(SemaphoreGuard),
    /// The quorum lock on KEY, over several databases (`quorum.rs`).
    Quorum(QuorumGuard),
}

impl Held {
    pub(crate) fn lost(&self) -> LostSignal {
        match self {
            Self::Lock(g) => g.lost(),
            Self::Permit(g) => g.lost(),
            Self::Quorum(g) => g.lost(),
        }
    }

    pub(crate) fn is_lost(&self) -> bool {
        match self {
            Self::Lock(g) => g.is_lost(),
            Self::Permit(g) => g.is_lost(),
            Self::Quorum(g) => g.is_lost(),
        }
    }

    /// Gives it back: whether it was still held.
    pub(crate) async fn release(self) -> Result<bool, sqlock::Error> {
        match self {
            Self::Lock(g) => g.release().await,
            Self::Permit(g) => g.release().await,
            Self::Quorum(g) => g.release().await,
        }
    }

    /// What the command's environment says of it: the key, owner and fencing token,
    /// for a permit the limit and the permit's slot key, and for a quorum lock how
    /// many databases hold it (its owner is the first database's handle's).
    pub(crate) fn env(
        &self,
        target: Target<'_>,
        limit: Option<u32>,
    ) -> Vec<(&'static str, String)> {
        let owner = match target {
            Target::Locker(locker) => locker.owner(),
            Target::Quorum(quorum) => quorum.members()[0].owner(),
        };
        match self {
            Self::Lock(g) => vec![
                ("SQLOCK_KEY", g.key().to_owned()),
                ("SQLOCK_OWNER", g.owner().to_string()),
                ("SQLOCK_FENCING_TOKEN", g.fencing_token().to_string()),
            ],
            Self::Permit(g) => vec![
                ("SQLOCK_KEY", g.name().to_owned()),
                ("SQLOCK_OWNER", owner.to_string()),
                ("SQLOCK_FENCING_TOKEN", g.fencing_token().to_string()),
                ("SQLOCK_LIMIT", limit.unwrap_or(1).to_string()),
                (
                    "SQLOCK_PERMIT",
                    g.keys().next().unwrap_or_default().to_owned(),
                ),
            ],
            Self::Quorum(g) => vec![
                ("SQLOCK_KEY", g.key().to_owned()),
                ("SQLOCK_OWNER", owner.to_string()),
                ("SQLOCK_FENCING_TOKEN", g.fencing_token().to_string()),
                (
                    "SQLOCK_QUORUM",
                    format!("{}/{}", g.held(), target_members(target)),
                ),
            ],
        }
    }
}

/// How many databases a run's target spans.
fn target_members(target: Target<'_>) -> usize {
    match target {
        Target::Locker(_) => 1,
        Target::Quorum(quorum) => quorum.members().len(),
    }
}
