//! The public API: [`Locker`](crate::Locker) and how it is built, its requests and
//! their wait loop, the guards it hands out, and the operators' calls (list, lookup,
//! force release, sweeps). Each public type's methods live with it, or in a file named
//! for their concern.

pub(crate) mod admin;
pub(crate) mod builder;
mod fence;
pub(crate) mod guard;
pub(crate) mod locker;
pub(crate) mod request;
pub(crate) mod sweeping;
