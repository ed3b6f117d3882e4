//! The public API: [`Locker`](crate::Locker) and how it is built, its requests, the
//! guards it hands out, the operators' calls (list, lookup, force release, sweeps),
//! elections (campaign, leadership, observation), semaphores (their permits' guards,
//! what an operator sees of them), and quorum locks over several databases. Each public
//! type's methods live with it, or in a file named for their concern.

pub(crate) mod admin;
pub(crate) mod builder;
pub mod check;
pub(crate) mod election;
pub(crate) mod fence;
pub(crate) mod guard;
pub(crate) mod guard_set;
pub(crate) mod leadership;
pub(crate) mod locker;
pub(crate) mod multi;
pub(crate) mod observe;
pub(crate) mod permits;
pub(crate) mod quorum;
pub(crate) mod request;
pub(crate) mod rwlock;
pub(crate) mod rwlock_info;
pub(crate) mod semaphore;
pub(crate) mod sweeping;
