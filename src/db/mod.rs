//! The database layer: one backend per server behind the traits of `backend.rs`, the
//! statements of `sql/` rendered and typed, the schema and its migrations.
//!
//! This layer knows no strategy and no handle: it runs statements and reports what
//! they found, sorted by whether the caller may retry. The servers are told apart in
//! one place, [`per_server!`], by the enums over them: [`DbPool`] (the application's
//! pool, `pool.rs`), [`Db`] (a handle's backend, `server.rs`) and [`DbTransaction`]
//! (a for-update lock's transaction). Each primitive's statement group is declared in
//! `groups.rs`; its steps module declares its own calls on `Db` beside its steps.

// Built with SQLite alone, the parts for the servers (row locks, schedulers) go unused.
#![cfg_attr(
    not(any(feature = "postgres", feature = "mysql")),
    allow(dead_code, unused_variables, unused_imports, unused_macros)
)]

pub(crate) mod backend;
mod declare;
mod dialect;
pub(crate) mod durability;
pub(crate) mod fair;
pub(crate) mod fence;
mod groups;
#[cfg(feature = "sqlite")]
pub(crate) mod marker_file;
pub(crate) mod multi;
#[cfg(feature = "mysql")]
mod mysql;
mod outcome;
mod per_server;
mod pool;
#[cfg(feature = "postgres")]
mod postgres;
pub(crate) mod presence;
pub(crate) mod rendered;
pub(crate) mod retry;
pub(crate) mod revoke;
pub(crate) mod runner;
pub(crate) mod rw;
pub(crate) mod scheduling;
pub(crate) mod schema;
pub(crate) mod semaphore;
mod server;
pub(crate) mod shared;
#[cfg(feature = "sqlite")]
mod sqlite;
pub(crate) mod statement;
pub(crate) mod transaction;
pub(crate) mod values;

pub use dialect::{Dialect, UnknownDialect};
pub(crate) use outcome::{Elected, Failure, Grant, Listed};
pub(crate) use per_server::per_server;
pub use pool::DbPool;
pub(crate) use runner::noting_checkout;
pub(crate) use server::{Db, OnRowLocks};
pub use transaction::DbTransaction;
