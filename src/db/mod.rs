//! The database layer: one backend per server behind the traits of `backend.rs`, the
//! statements of `sql/` rendered and typed, the schema and its migrations.
//!
//! This layer knows no strategy and no handle: it runs statements and reports what
//! they found, sorted by whether the caller may retry. The servers are told apart in
//! one place, [`per_server!`], by the enums over them: [`DbPool`] (the application's
//! pool, `pool.rs`), [`Db`] (a handle's backend, `server.rs`) and [`DbTransaction`]
//! (a for-update lock's transaction). Each primitive's statement group is declared in
//! `groups.rs`; the steps that run them in transactions, with their calls on `Db`,
//! live in the primitive's strategy module (`strategy/<primitive>/steps.rs`), above
//! this layer.

// Built with SQLite alone, the parts for the servers (row locks, schedulers) go unused.
#![cfg_attr(
    not(any(feature = "postgres", feature = "mysql")),
    allow(dead_code, unused_variables, unused_imports, unused_macros)
)]

pub(crate) mod backend;
mod declare;
mod dialect;
pub(crate) mod durability;
pub(crate) mod fence;
mod groups;
#[cfg(feature = "sqlite")]
pub(crate) mod marker_file;
#[cfg(feature = "mysql")]
mod mysql;
mod outcome;
pub(crate) mod per_server;
mod pool;
#[cfg(feature = "postgres")]
mod postgres;
pub(crate) mod presence;
pub(crate) mod rendered;
pub(crate) mod retry;
pub(crate) mod revoke;
pub(crate) mod runner;
pub(crate) mod scheduling;
pub(crate) mod schema;
mod server;
pub(crate) mod shared;
#[cfg(feature = "sqlite")]
mod sqlite;
pub(crate) mod statement;
pub(crate) mod transaction;
pub(crate) mod values;
pub(crate) mod wake_lock;

pub use dialect::{Dialect, UnknownDialect};
pub(crate) use outcome::{Elected, Failure, Grant, Listed, TakenAll};
pub(crate) use per_server::per_server;
pub use pool::DbPool;
pub(crate) use runner::noting_checkout;
pub(crate) use server::on_backend;
pub(crate) use server::{Db, OnRowLocks};
pub use transaction::DbTransaction;
