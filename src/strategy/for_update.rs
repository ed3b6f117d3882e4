//! The for-update strategy: a lock held as a row lock (`SELECT ... FOR UPDATE`) in an
//! open transaction, for as long as the guard keeps the transaction open.
//!
//! The database ends the lock itself when the transaction ends, by commit, rollback
//! or a dead connection, so a crashed holder frees it at once. The guard lends its
//! transaction, so the holder's own writes commit atomically with the end of the lock
//! (see [`held_transaction`](super::held_transaction)).
//!
//! The protocol, written once for every server: make sure the key has a row (created
//! free, outside the transaction); begin; bound the transaction's lock waits and take
//! the key's gate (PostgreSQL's transaction-scoped advisory lock, which keeps lease
//! and insert attempts off the key); lock the row; grant, unless a live lease or insert
//! lock holds the key, drawing a fencing token and putting back what the bound
//! replaced. The dialect supplies the statements and how the token comes back.

// Built without a server feature (SQLite only), the strategy has nothing to run on:
// the code stays, refusing it, and its parameters go unused.
#![cfg_attr(
    not(any(feature = "postgres", feature = "mysql")),
    allow(unused_variables, dead_code, unused_imports, unreachable_code)
)]

use crate::dialect::{
    checked_out, DbPool, Failure, ForUpdateStatements, GaleraCheck, Runner, Statements,
};
use crate::error::{Class, Error};
use crate::sql::Args;
use crate::table::LockTable;

use super::held_transaction::DbTransaction;

/// One attempt to take the row lock: `Ok(None)` when the row (or the key's gate) is
/// held by another transaction, for as long as the attempt waited; [`Class::Held`]
/// when a live lease or insert lock holds the key.
pub(crate) async fn attempt(
    table: &LockTable,
    args: &Args,
    nowait: bool,
) -> Result<Option<(DbTransaction, i64)>, Failure> {
    let (db, stmts) = (&table.db, &table.stmts);
    refuse_galera(db, stmts, &table.galera).await?;
    let Some(f) = &stmts.for_update else {
        return Err(unsupported());
    };
    let outcome: Result<Taken<(DbTransaction, i64)>, sqlx::Error> = match db {
        #[cfg(feature = "postgres")]
        DbPool::Postgres(pool) => take(pool, f, args, nowait)
            .await
            .map(|t| t.map(|(tx, token)| (DbTransaction::Postgres(tx), token))),
        #[cfg(feature = "mysql")]
        DbPool::MySql(pool) => take(pool, f, args, nowait)
            .await
            .map(|t| t.map(|(tx, token)| (DbTransaction::MySql(tx), token))),
        #[allow(unreachable_patterns)]
        _ => return Err(unsupported()),
    };
    match outcome.map_err(|e| stmts.failure(e)) {
        Ok(Taken::Granted(granted)) => Ok(Some(granted)),
        Ok(Taken::Busy) => Ok(None),
        Ok(Taken::HeldByLease) => Err(Failure::row_locked(Class::Held, &args.key)),
        // The row stayed locked for as long as the attempt waited.
        Err(f) if f.class == Class::Contention => Ok(None),
        Err(f) => Err(f),
    }
}

/// What one run of the protocol took.
enum Taken<G> {
    Granted(G),
    /// The row or the gate stayed held by another transaction.
    Busy,
    /// A live lease or insert lock holds the key.
    HeldByLease,
}

impl<G> Taken<G> {
    fn map<H>(self, f: impl FnOnce(G) -> H) -> Taken<H> {
        match self {
            Self::Granted(g) => Taken::Granted(f(g)),
            Self::Busy => Taken::Busy,
            Self::HeldByLease => Taken::HeldByLease,
        }
    }
}

/// The protocol on one server: a transaction holding the key's row lock, with the
/// grant's token.
async fn take<DB: Runner>(
    pool: &sqlx::Pool<DB>,
    f: &ForUpdateStatements,
    a: &Args,
    nowait: bool,
) -> Result<Taken<(sqlx::Transaction<'static, DB>, i64)>, sqlx::Error> {
    if let Some(probe) = &f.probe {
        // MariaDB: a row that is missing is created before the transaction, which so
        // never reads a missing key with a lock (a gap lock, which would keep out
        // acquisitions of the neighbouring keys).
        if DB::fetch_i64s(pool, probe, a).await?.is_empty() {
            DB::execute(pool, &f.ensure, a).await?;
        }
    }
    let mut tx = pool.begin().await?;
    checked_out();
    let mut locked = lock_row::<DB>(&mut tx, f, a, nowait).await?;
    if matches!(locked, LockRow::NoRow) {
        // The key has no row yet (or, on MariaDB, no more: the sweeper took it since
        // the probe): create it free, in a statement of its own outside the
        // transaction (which so never waits on, or holds, a fresh insert), and lock it
        // in a new transaction.
        tx.rollback().await?;
        DB::execute(pool, &f.ensure, a).await?;
        tx = pool.begin().await?;
        locked = lock_row::<DB>(&mut tx, f, a, nowait).await?;
    }
    let LockRow::Locked(saved) = locked else {
        return Ok(Taken::Busy);
    };
    // The grant puts back the setting the bound replaced (PostgreSQL's lock_timeout):
    // the holder's own statements wait as the connection's settings say.
    let mut grant = a.clone();
    grant.setting = saved.unwrap_or_default();
    match DB::value_on(&mut tx, &f.grant, &grant).await? {
        Some(token) => Ok(Taken::Granted((tx, token))),
        None => {
            tx.rollback().await?;
            Ok(Taken::HeldByLease)
        }
    }
}

/// What [`lock_row`] found.
enum LockRow {
    /// The row is locked; the setting the bound replaced, to put back.
    Locked(Option<String>),
    /// The key has no row yet.
    NoRow,
    /// The key's gate was taken (PostgreSQL, a single attempt): busy.
    GateTaken,
}

/// Takes the key's row lock inside the open transaction on `conn`, bounding the wait
/// where the dialect needs a setting for it (always, so that no wait of the
/// transaction is unbounded), after the key's gate where the dialect has one.
async fn lock_row<DB: Runner>(
    conn: &mut DB::Connection,
    f: &ForUpdateStatements,
    a: &Args,
    nowait: bool,
) -> Result<LockRow, sqlx::Error> {
    let saved = match &f.begin {
        Some((wait, once)) => {
            let begin = if nowait { once } else { wait };
            let (before, open) = DB::text_and_flag_on(conn, begin, a).await?;
            if !open {
                return Ok(LockRow::GateTaken);
            }
            Some(before)
        }
        None => None,
    };
    let lock = if nowait { &f.lock_nowait } else { &f.lock };
    Ok(if DB::exists_on(conn, lock, a).await? {
        LockRow::Locked(saved)
    } else {
        LockRow::NoRow
    })
}

/// Refuses the for-update strategy on a node of a Galera cluster of several nodes.
///
/// Galera certifies a transaction's writes across the cluster only at COMMIT; a row
/// lock taken by `SELECT ... FOR UPDATE` stays on the node that took it. A holder on one
/// node therefore does not exclude a holder on another: both "hold" the row, and one
/// learns of the other only when its COMMIT fails. The lease and insert strategies take
/// the lock by a write, which certification orders across the cluster.
#[cfg_attr(not(feature = "mysql"), allow(unused_variables))]
async fn refuse_galera(
    db: &DbPool,
    stmts: &Statements,
    galera: &GaleraCheck,
) -> Result<(), Failure> {
    if let Some(nodes) = db.galera_cluster_size(stmts, galera).await? {
        return Err(Failure {
            class: Class::Unsupported,
            error: Error::GaleraCluster { nodes },
        });
    }
    Ok(())
}

/// The for-update strategy on a database without row locks (refused earlier, before
/// any SQL is sent, by the request's checks).
fn unsupported() -> Failure {
    Failure {
        class: Class::Unsupported,
        error: Error::StrategyUnsupported {
            strategy: "for-update",
            dialect: "sqlite",
        },
    }
}
