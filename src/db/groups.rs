//! The statement groups of the family's primitives, one declaration each: its type,
//! its templates and their rendering (`declare.rs`), and its line in [`Family`], which
//! a backend's statements (`backend.rs`) hold as one group. The steps that run them
//! live in each primitive's strategy module (`strategy/<primitive>/steps.rs`), the
//! holds of a name in shared mode's in `shared.rs`.
//!
//! They are declared here, below `backend.rs` and apart from the steps, so that the
//! backends hold the groups without importing the steps, which run on the backends.

use super::declare::statements;
use super::values::{
    Acquire, Held, Key, KeyList, Limit, Mark, Parent, Permits, Place, Present, Push, Raise, Share,
    Slots, Sweep,
};

statements! {
    /// The family's statement groups, one line each, held by every backend's
    /// statements (`Common::family`): a new primitive's group is named here, and
    /// nowhere else.
    Family / FamilyTemplates for { postgres: "postgres", mysql: "mysql", sqlite: "sqlite" } {}
    groups {
        /// The fair queue's statements (`strategy/fair/steps.rs`).
        fair: Fair / FairTemplates,
        /// The semaphore's statements (`strategy/semaphore/steps.rs`).
        semaphore: Semaphore / SemaphoreTemplates,
        /// The read-write lock's statements (`strategy/rwlock/steps.rs`).
        rw: Rw / RwTemplates,
        /// The statements of the holds of a name in shared mode (`shared.rs`).
        shared: Shared / SharedTemplates,
        /// The quorum lock's token (`strategy/quorum/steps.rs`).
        quorum: Quorum / QuorumTemplates,
    }
}

statements! {
    /// The quorum lock's statements (`quorum_*.sql`), every server's: its steps are in
    /// `strategy/quorum/steps.rs`.
    Quorum / QuorumTemplates for { postgres: "postgres", mysql: "mysql", sqlite: "sqlite" } {
        /// The highest quorum token a database saw granted for a key.
        seen: Key<'static> = "quorum_seen",
        /// The token raised, where the holder's lease is still its own.
        raise: Raise<'static> = "quorum_raise",
    }
}

statements! {
    /// The fair strategy's statements (`fair_*.sql`), every server's: the steps of its
    /// queue, which `strategy/fair/steps.rs` runs in transactions of its own.
    Fair / FairTemplates for { postgres: "postgres", mysql: "mysql", sqlite: "sqlite" } {
        gate: Key<'static> = "fair_gate",
        enqueue: Place<'static> = "fair_enqueue",
        renew: Place<'static> = "fair_renew",
        status: Place<'static> = "fair_status",
        head: Key<'static> = "fair_head",
        /// The key's row made sure of and marked queued (the servers' flag; SQLite,
        /// which reads the queue itself, only makes sure of the row).
        ensure: Key<'static> = "fair_ensure",
        /// The lock handed to the first live waiter, when it is free, expired, or
        /// held by a holder whose presence marker is gone.
        take: Place<'static> = "fair_take",
        mark: Mark<'static> = "fair_mark",
        /// Presence: the waiter's marker recorded in the grant it took up, where the
        /// table keeps markers (PostgreSQL, MariaDB; never sent to SQLite).
        present: Present<'static> = "fair_present",
        leave: Place<'static> = "fair_leave",
        sweep: Sweep<'static> = "fair_sweep",
        /// A holder's release without the queue, while nobody is queued: one statement.
        release: Held<'static> = "fair_release",
        /// The key's queued flag cleared by a handoff that found no live waiter.
        drained: Key<'static> = "fair_drained",
    }
}

statements! {
    /// The read-write lock's statements (`rw_*.sql`), every server's: its steps are
    /// in `strategy/rwlock/steps.rs`.
    Rw / RwTemplates for { postgres: "postgres", mysql: "mysql", sqlite: "sqlite" } {
        /// The key's gate, taken shared by a read's transaction.
        gate: Key<'static> = "rw_gate",
        /// A read hold, in a transaction holding the key's gate.
        read: Acquire<'static> = "rw_read",
        /// The name marked held by reads, after a read hold, in its transaction.
        mark: Share<'static> = "rw_mark",
        /// The write side's release: one hold given back, and with the last the name
        /// left to the writer's own read, when it holds one, or freed.
        release: Held<'static> = "rw_release",
        /// Presence: the live reads of a name whose holders may be gone, but the
        /// asking writer's own.
        gone: Held<'static> = "rw_gone",
        /// Presence: one of those reads dropped, if its holder is still gone.
        drop_gone: Held<'static> = "rw_drop_gone",
    }
}

statements! {
    /// The semaphore's statements (`semaphore_*.sql`), every server's: its steps are
    /// in `strategy/semaphore/steps.rs`.
    Semaphore / SemaphoreTemplates for { postgres: "postgres", mysql: "mysql", sqlite: "sqlite" } {
        /// Records a semaphore with its N unless it is recorded.
        ensure: Permits<'static> = "semaphore_ensure",
        /// Locks the semaphore's row: its gate, and the N recorded.
        gate: Key<'static> = "semaphore_gate",
        /// The N a semaphore is recorded with.
        permits: Key<'static> = "semaphore_permits",
        /// Takes free slots, under the gate.
        take: Slots<'static> = "semaphore_take",
        /// The live permits of a semaphore's slots.
        holders: Slots<'static> = "semaphore_holders",
        /// The recorded semaphores.
        list: Limit = "semaphore_list",
        /// The name marked held by permits, after they were taken.
        mark: Share<'static> = "semaphore_mark",
    }
}

statements! {
    /// The statements of the holds of a name in shared mode (`shared_*.sql`), every
    /// server's, reads and permits alike: their steps are in `shared.rs`.
    Shared / SharedTemplates for { postgres: "postgres", mysql: "mysql", sqlite: "sqlite" } {
        /// One hold given back: the holds left.
        release: Held<'static> = "shared_release",
        /// The name counts one hold less, and is free at none.
        leave: Parent<'static> = "shared_leave",
        /// The name pushed as far as a hold of it, once the hold was extended.
        push: Push<'static> = "shared_push",
        /// An operator's release of a name: the holds to release with it.
        holds: Key<'static> = "shared_holds",
        /// An operator's release of those holds.
        force: KeyList = "shared_force",
        /// An operator's release of one hold.
        drop: Key<'static> = "shared_drop",
        /// An operator's revocation of holds (`revoke.rs`).
        revoke: KeyList = "shared_revoke",
    }
}
