//! The parts of a run, each measuring the library beside its baselines: uncontended
//! cycles, contended handoff, the watchdog's renewals, and a large table.

pub(crate) mod contended;
pub(crate) mod scale;
pub(crate) mod uncontended;
pub(crate) mod watchdog;
