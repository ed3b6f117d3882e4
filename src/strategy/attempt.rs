//! The cancel-safe attempt: one acquisition of any strategy, run in a task of its own
//! so that it is never cut off half way.
//!
//! If the caller stops waiting (its future was dropped, or its deadline passed),
//! whatever the attempt took is given back: by the task when the caller was gone
//! before the outcome was sent, or by [`Landing`] when the outcome was sent but never
//! read. A lease whose statement waited in the database past its own TTL is given back
//! too: it may have lapsed before it arrived.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::dialect::{noting_checkout, Failure, Grant};
use crate::error::{Class, Error};
use crate::sql::Args;
use crate::strategy::for_update;
use crate::strategy::held_transaction::DbTransaction;
use crate::strategy::lease;
use crate::strategy_name::Strategy;
use crate::table::{InFlight, LockTable};

/// What one attempt took.
#[derive(Debug)]
pub(crate) enum Granted {
    /// A lease or insert row.
    Lease(Grant),
    /// A row lock in an open transaction, with the grant's token.
    Tx(DbTransaction, i64),
}

/// One attempt of `args.strategy`, and when its statement was sent (a lease is valid
/// at least until then plus its TTL, whenever the database ran the statement).
/// `nowait`: a for-update attempt does not wait in the database.
///
/// `Ok(None)` when the lock is held, [`Class::Contention`] when the attempt lost a race
/// (try again), [`Class::Held`] when a lock of another strategy holds the key.
///
/// `reached` is set once a statement of the attempt has a pooled connection, or once
/// the attempt has waited for an earlier attempt of the handle on the key: it stays
/// readable after the caller stopped waiting.
pub(crate) async fn attempt(
    table: &Arc<LockTable>,
    args: &Args,
    strategy: Strategy,
    nowait: bool,
    reached: Arc<AtomicBool>,
) -> Result<Option<(Granted, Instant)>, Failure> {
    // An earlier attempt of this handle on the key whose caller stopped waiting may be
    // holding it for a moment: the answer is known once it has given it back. That
    // attempt had a connection (or waited for one alongside this): a wait held up by it
    // was served by the pool, which is not exhausted on its account.
    if table.attempts_settled(&args.key).await {
        reached.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    let in_flight = table.attempt_started(&args.key);
    let (tx, rx) = oneshot::channel();
    let sent = Instant::now();
    let task_table = table.clone();
    let task_args = args.clone();
    tokio::spawn(async move {
        let statements = async {
            match strategy {
                Strategy::ForUpdate => for_update::attempt(&task_table, &task_args, nowait)
                    .await
                    .map(|o| o.map(|(tx, token)| Granted::Tx(tx, token))),
                _ => lease::attempt(&task_table, &task_args)
                    .await
                    .map(|o| o.map(Granted::Lease)),
            }
        };
        let outcome = noting_checkout(reached, statements).await;
        // The mark goes with the outcome: the attempt is over once the caller has read
        // it, or once what it took has been given back.
        if let Err((Ok(Some(granted)), in_flight)) = tx.send((outcome, in_flight)) {
            give_back(task_table, task_args, granted, in_flight).await;
        }
    });
    let mut landing = Landing {
        rx,
        table: table.clone(),
        args: args.clone(),
        read: false,
        runtime: tokio::runtime::Handle::current(),
    };
    let outcome = (&mut landing.rx).await;
    landing.read = true;
    let Ok((outcome, in_flight)) = outcome else {
        // The task panicked: nothing was granted to us that we know of.
        return Err(Failure {
            class: Class::Other,
            error: Error::Database(sqlx::Error::WorkerCrashed),
        });
    };
    match outcome {
        // A statement that waited in the database (for a row another statement was
        // writing, or a fenced transaction) past the TTL it asked for grants a lease
        // that may have lapsed already, counted from when the statement was sent: no
        // grant to hand out. It is given back, and the caller told to try again.
        Ok(Some(Granted::Lease(grant)))
            if Instant::now() >= sent + Duration::from_micros(args.ttl_us.unsigned_abs()) =>
        {
            tokio::spawn(give_back(
                table.clone(),
                args.clone(),
                Granted::Lease(grant),
                in_flight,
            ));
            // The key was free: not "busy", but a TTL the answer outran.
            Err(Failure {
                class: Class::Lapsed,
                error: Error::GrantExpired {
                    key: args.key.clone(),
                    ttl: Duration::from_micros(args.ttl_us.unsigned_abs()),
                    took: sent.elapsed(),
                },
            })
        }
        outcome => outcome.map(|granted| granted.map(|g| (g, sent))),
    }
}

/// What an attempt's task sends: its outcome, and its mark as an attempt under way.
type Sent = (Result<Option<Granted>, Failure>, InFlight);

/// The receiving end of an attempt. Dropped unread, it closes the channel (so a later
/// send fails and the task gives the grant back) and gives back a grant that was
/// already sent.
struct Landing {
    rx: oneshot::Receiver<Sent>,
    table: Arc<LockTable>,
    args: Args,
    read: bool,
    /// The runtime the attempt runs on, for a drop outside of any runtime.
    runtime: tokio::runtime::Handle,
}

impl Drop for Landing {
    fn drop(&mut self) {
        if self.read {
            return;
        }
        self.rx.close();
        if let Ok((Ok(Some(granted)), in_flight)) = self.rx.try_recv() {
            let (table, args) = (self.table.clone(), std::mem::take(&mut self.args));
            // Outside of any runtime, the attempt's own runtime gives it back; if that
            // one has shut down, the lease lapses at its expiry (and a transaction
            // ends with its connection).
            let runtime =
                tokio::runtime::Handle::try_current().unwrap_or_else(|_| self.runtime.clone());
            let _entered = runtime.enter();
            drop(runtime.spawn(give_back(table, args, granted, in_flight)));
        }
    }
}

/// Releases a grant nobody is waiting for any more (a transaction is rolled back), and
/// only then ends the attempt's mark.
async fn give_back(table: Arc<LockTable>, mut args: Args, granted: Granted, in_flight: InFlight) {
    let grant = match granted {
        Granted::Lease(grant) => grant,
        Granted::Tx(tx, _) => {
            // Should the rollback fail, the connection is closed as it goes back to
            // the pool, which ends the transaction on the server all the same.
            let _ = tx.rollback().await;
            drop(in_flight);
            return;
        }
    };
    args.token = grant.token;
    if let Err(e) = lease::release(&table, &args).await {
        tracing::warn!(key = %args.key, error = %e,
            "could not give back a lock taken for a caller that stopped waiting; \
             it lapses at its expiry");
    }
    drop(in_flight);
}
