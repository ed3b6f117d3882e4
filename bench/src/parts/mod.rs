//! The parts of a run, each measuring the library beside its baselines: uncontended
//! cycles, contended handoff, the watchdog's renewals, a large table, and the peers.

pub(crate) mod contended;
pub(crate) mod peers;
pub(crate) mod scale;
pub(crate) mod uncontended;
pub(crate) mod watchdog;
