//! The for-update strategy: a lock held as a row lock (`SELECT ... FOR UPDATE`) in an
//! open transaction, for as long as the guard keeps the transaction open.
//!
//! The database ends the lock itself when the transaction ends, by commit, rollback
//! or a dead connection, so a crashed holder frees it at once. The guard lends its
//! transaction, so the holder's own writes commit atomically with the end of the lock.
//! A keepalive on the held connection notices a connection the server ended (an
//! idle-in-transaction timeout, a kill) and fires the guard's lost signal.

// Built without a server feature (SQLite only), the strategy has nothing to run on:
// the code stays, refusing it, and its parameters go unused.
#![cfg_attr(
    not(any(feature = "postgres", feature = "mysql")),
    allow(unused_variables, dead_code)
)]

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, MappedMutexGuard, Mutex, MutexGuard};

use crate::dialect::{DbPool, Failure, GaleraCheck, Statements};
use crate::error::{Class, Error};
use crate::sql::Args;
use crate::watchdog::LostReason;

/// The open transaction of a for-update lock, lent by
/// [`LockGuard::transaction`](crate::LockGuard::transaction).
///
/// Run your own statements on it; they commit with
/// [`LockGuard::commit`](crate::LockGuard::commit) (or
/// [`release`](crate::LockGuard::release)) and are rolled back with the lock otherwise.
#[derive(Debug)]
#[non_exhaustive]
pub enum DbTransaction {
    /// A PostgreSQL transaction.
    #[cfg(feature = "postgres")]
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
    /// A MariaDB transaction.
    #[cfg(feature = "mysql")]
    MySql(sqlx::Transaction<'static, sqlx::MySql>),
}

impl DbTransaction {
    /// The PostgreSQL transaction, if this is one.
    ///
    /// ```no_run
    /// # async fn example(guard: sqlock::LockGuard) -> Result<(), sqlx::Error> {
    /// if let Some(mut tx) = guard.transaction().await {
    ///     if let Some(pg) = tx.as_postgres_mut() {
    ///         sqlx::query("UPDATE jobs SET done = TRUE WHERE id = 7").execute(&mut **pg).await?;
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "postgres")]
    pub fn as_postgres_mut(&mut self) -> Option<&mut sqlx::Transaction<'static, sqlx::Postgres>> {
        #[allow(unreachable_patterns)]
        match self {
            Self::Postgres(tx) => Some(tx),
            _ => None,
        }
    }

    /// The MariaDB transaction, if this is one.
    #[cfg(feature = "mysql")]
    pub fn as_mysql_mut(&mut self) -> Option<&mut sqlx::Transaction<'static, sqlx::MySql>> {
        #[allow(unreachable_patterns)]
        match self {
            Self::MySql(tx) => Some(tx),
            _ => None,
        }
    }

    async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(tx) => tx.commit().await,
            #[cfg(feature = "mysql")]
            Self::MySql(tx) => tx.commit().await,
        }
    }

    async fn rollback(self) -> Result<(), sqlx::Error> {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(tx) => tx.rollback().await,
            #[cfg(feature = "mysql")]
            Self::MySql(tx) => tx.rollback().await,
        }
    }
}

/// A held for-update lock: the transaction, shared between the guard and its
/// keepalive task.
#[derive(Debug)]
pub(crate) struct TxHold {
    tx: Mutex<Option<DbTransaction>>,
    lost: watch::Sender<Option<LostReason>>,
    keepalive: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl TxHold {
    /// Wraps a transaction that holds a row lock, and starts its keepalive.
    pub(crate) fn start(
        tx: DbTransaction,
        stmts: &Statements,
        every: Duration,
    ) -> (Arc<Self>, watch::Receiver<Option<LostReason>>) {
        let (lost, rx) = watch::channel(None);
        let hold = Arc::new(Self {
            tx: Mutex::new(Some(tx)),
            lost,
            keepalive: std::sync::Mutex::new(None),
        });
        if let Some(f) = &stmts.for_update {
            let weak = Arc::downgrade(&hold);
            let statement = f.keepalive.clone();
            let task = tokio::spawn(async move {
                let mut ticks = tokio::time::interval(every);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                ticks.tick().await;
                loop {
                    ticks.tick().await;
                    let Some(hold) = weak.upgrade() else { return };
                    let mut slot = hold.tx.lock().await;
                    let Some(tx) = slot.as_mut() else { return };
                    if let Err(e) = keepalive(tx, &statement).await {
                        tracing::warn!(error = %e, "the connection holding a for-update lock failed its keepalive; the lock is lost");
                        hold.lost.send_replace(Some(LostReason::ConnectionLost));
                        return;
                    }
                }
            });
            *hold.keepalive.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
        }
        (hold, rx)
    }

    /// The transaction, while the lock is held.
    pub(crate) async fn transaction(&self) -> Option<MappedMutexGuard<'_, DbTransaction>> {
        MutexGuard::try_map(self.tx.lock().await, Option::as_mut).ok()
    }

    fn stop_keepalive(&self) {
        if let Some(task) = self
            .keepalive
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            task.abort();
        }
    }

    /// Commits, ending the lock. `Ok(false)` when the transaction was already gone
    /// (its connection ended): the lock had been lost and nothing was committed.
    pub(crate) async fn commit(&self) -> Result<bool, Error> {
        self.stop_keepalive();
        let Some(tx) = self.tx.lock().await.take() else {
            return Ok(false);
        };
        match tx.commit().await {
            Ok(()) => Ok(!self.lost.borrow().is_some()),
            Err(e) if connection_gone(&e) => {
                self.lost.send_replace(Some(LostReason::ConnectionLost));
                Ok(false)
            }
            Err(e) => Err(Error::Database(e)),
        }
    }

    /// Rolls back, ending the lock.
    pub(crate) async fn rollback(&self) -> Result<(), Error> {
        self.stop_keepalive();
        match self.tx.lock().await.take() {
            Some(tx) => match tx.rollback().await {
                Err(e) if !connection_gone(&e) => Err(Error::Database(e)),
                // A connection that is gone has rolled back already.
                _ => Ok(()),
            },
            None => Ok(()),
        }
    }

    /// Ends the lock without waiting: the transaction is dropped, and sqlx rolls it
    /// back when the connection goes back to the pool.
    pub(crate) fn abandon(&self) {
        self.stop_keepalive();
        if let Ok(mut slot) = self.tx.try_lock() {
            slot.take();
        }
    }
}

/// Whether a failed statement means the connection is gone (so the server has ended
/// the transaction and its locks).
fn connection_gone(e: &sqlx::Error) -> bool {
    matches!(
        e,
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed
    ) || e
        .as_database_error()
        .is_some_and(|d| d.message().contains("terminat") || d.message().contains("killed"))
}

async fn keepalive(
    tx: &mut DbTransaction,
    statement: &crate::sql::Statement,
) -> Result<(), sqlx::Error> {
    let args = Args::default();
    // Matched as a place, so that a build with neither server feature (no variants)
    // still compiles.
    match *tx {
        #[cfg(feature = "postgres")]
        DbTransaction::Postgres(ref mut tx) => statement
            .bind::<sqlx::Postgres>(&args)
            .execute(&mut **tx)
            .await
            .map(drop),
        #[cfg(feature = "mysql")]
        DbTransaction::MySql(ref mut tx) => statement
            .bind::<sqlx::MySql>(&args)
            .execute(&mut **tx)
            .await
            .map(drop),
    }
}

/// One attempt to take the row lock: `Ok(None)` when the row is locked by another
/// transaction (the wait, if any, ran out).
pub(crate) async fn attempt(
    db: &DbPool,
    stmts: &Statements,
    args: &Args,
    nowait: bool,
    galera: &GaleraCheck,
) -> Result<Option<(DbTransaction, i64)>, Failure> {
    refuse_galera(db, stmts, galera).await?;
    let outcome: Result<Option<(DbTransaction, i64)>, Failure> = match db {
        #[cfg(feature = "postgres")]
        DbPool::Postgres(pool) => crate::dialect::pg_for_update(pool, stmts, args, nowait)
            .await
            .map(|o| o.map(|(tx, token)| (DbTransaction::Postgres(tx), token))),
        #[cfg(feature = "mysql")]
        DbPool::MySql(pool) => crate::dialect::mysql_for_update(pool, stmts, args, nowait)
            .await
            .map(|o| o.map(|(tx, token)| (DbTransaction::MySql(tx), token))),
        #[allow(unreachable_patterns)]
        _ => Err(unsupported()),
    };
    match outcome {
        Ok(o) => Ok(o),
        Err(f) if f.class == Class::Contention => Ok(None),
        Err(f) => Err(f),
    }
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
            error: Error::Unsupported(format!(
                "the for-update strategy cannot lock on a Galera cluster (this server is \
                 one of {nodes} nodes): SELECT ... FOR UPDATE locks the row on this node \
                 only, so holders on two nodes both get it and one learns of the other \
                 only when its COMMIT fails; use the lease strategy (or insert), whose \
                 acquisitions are writes that certification orders across the cluster"
            )),
        });
    }
    Ok(())
}

fn unsupported() -> Failure {
    Failure {
        class: Class::Unsupported,
        error: Error::Unsupported(
            "the for-update strategy needs row locks, which SQLite does not have: use the \
             lease or insert strategy there"
                .into(),
        ),
    }
}
