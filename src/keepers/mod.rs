//! The keepers: the background work a handle does for its locks while the application
//! goes on. The watchdog renews held leases and fires their lost signal; the sweeper
//! reclaims expired rows, as a call, a task or a schedule inside the database; the
//! release listener (PostgreSQL) wakes waiters at a release, in other processes too,
//! and the wake-ups of one process wake its own waiters on every server; the presence keeper
//! holds the marker that tells the others the handle's process lives, and checks the
//! leases that record it whenever it changes connections; the server waits wake a
//! waiter the moment a crashed holder's marker is freed.

#[cfg(feature = "postgres")]
pub(crate) mod notify;
pub(crate) mod presence;
pub(crate) mod scheduled_sweep;
pub(crate) mod server_wait;
pub(crate) mod sweeper;
pub(crate) mod wake;
pub(crate) mod wake_lock;
pub(crate) mod watchdog;
