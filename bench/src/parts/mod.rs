//! The parts of a run, each measuring the library beside its baselines: uncontended
//! cycles, contended handoff, the watchdog's renewals, a large table, the peers, and
//! the semaphore and read-write locks beside the mutex.

pub(crate) mod contended;
pub(crate) mod peers;
pub(crate) mod rwlock;
pub(crate) mod scale;
pub(crate) mod semaphore;
pub(crate) mod uncontended;
pub(crate) mod watchdog;
