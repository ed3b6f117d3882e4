//! Running rendered statements: one trait, [`Runner`], implemented for each sqlx
//! database sqlock supports, so that the code above names one bound instead of the
//! many sqlx's generic executors need, and the readers of its results ([`grants`],
//! [`ints`], ...) written once over it.
//!
//! The implementations are stamped out by a macro with the concrete database type, so
//! sqlx's bounds are met there once. Statements run [`On`] a pool, each on a pooled
//! connection (in a transaction of its own when the statement is pinned for a
//! transaction-pooling proxy, or asked to), or on a connection whose transaction the
//! caller holds.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sqlx::Row as _;

use super::durability::Sent;
use super::outcome::{Elected, Grant, Listed};
use super::statement::{Statement, Values};

tokio::task_local! {
    /// For the statements of one acquisition attempt: set once one of them has a
    /// pooled connection, so that the wait around the attempt can tell a deadline
    /// that fell while the attempt was in the database (a timeout) from one that fell
    /// while no connection could be had (an exhausted pool).
    static CHECKED_OUT: Arc<AtomicBool>;
}

/// Runs `statements`, setting `flag` as soon as one of them has a pooled connection.
pub(crate) async fn noting_checkout<F: Future>(flag: Arc<AtomicBool>, statements: F) -> F::Output {
    CHECKED_OUT.scope(flag, statements).await
}

/// Notes, for the attempt this runs in (if any), that a statement has a connection.
pub(crate) fn checked_out() {
    let _ = CHECKED_OUT.try_with(|flag| flag.store(true, Ordering::Relaxed));
}

/// Notes, for the attempt this runs in, that `pool` has a connection to give it as it
/// asks (one idle, or room to open one). sqlx takes an idle connection out of the pool
/// before it checks it (a ping, by default) and counts one it opens before it is open:
/// meanwhile the pool looks exhausted, though the connection is this attempt's. A
/// deadline met then, on a loaded machine, is the attempt's timeout, not an exhausted
/// pool. (Should another task take the idle connection first, a deadline met waiting
/// for the next one is reported as a timeout too, the wider of the two answers.)
fn note_room<DB: sqlx::Database>(pool: &sqlx::Pool<DB>) {
    if pool.num_idle() > 0 || pool.size() < pool.options().get_max_connections() {
        checked_out();
    }
}

/// A transaction on a connection of `pool`, noted as the attempt's (see [`note_room`]).
pub(crate) async fn begin<DB: sqlx::Database>(
    pool: &sqlx::Pool<DB>,
) -> Result<sqlx::Transaction<'static, DB>, sqlx::Error> {
    note_room(pool);
    let tx = pool.begin().await?;
    checked_out();
    Ok(tx)
}

/// A connection of `pool`, noted as the attempt's (see [`note_room`]).
pub(crate) async fn acquire<DB: sqlx::Database>(
    pool: &sqlx::Pool<DB>,
) -> Result<sqlx::pool::PoolConnection<DB>, sqlx::Error> {
    note_room(pool);
    let conn = pool.acquire().await?;
    checked_out();
    Ok(conn)
}

/// A boxed, `Send` future of a statement's outcome.
pub(crate) type Fut<'a, T> = Pin<Box<dyn Future<Output = Result<T, sqlx::Error>> + Send + 'a>>;

/// Where a statement runs.
#[derive(Debug)]
pub(crate) enum On<'a, DB: sqlx::Database> {
    /// On a pooled connection; in an explicit transaction of its own when `true`
    /// (besides a pinned statement, which always is).
    Pool(&'a sqlx::Pool<DB>, bool),
    /// On a connection, inside the caller's transaction.
    Conn(&'a mut DB::Connection),
}

/// A sqlx database sqlock runs its statements on.
pub(crate) trait Runner: sqlx::Database {
    /// Every row `s` returns, read to the end of the response: an autocommit
    /// statement's COMMIT may still fail after its rows were sent (a Galera
    /// certification failure, a serialization failure), and what it answered then
    /// stands for nothing.
    fn rows<'a, V: Values>(
        on: On<'a, Self>,
        s: &'a Statement<V>,
        a: &'a V::With<'a>,
    ) -> Fut<'a, Vec<Self::Row>>;

    /// Runs `s` for its effect: the rows it matched (sqlx connects to MariaDB with
    /// CLIENT_FOUND_ROWS, so a matched row that a statement left unchanged counts too).
    fn execute<'a, V: Values>(
        on: On<'a, Self>,
        s: &'a Statement<V>,
        a: &'a V::With<'a>,
    ) -> Fut<'a, u64>;

    /// The one value a statement hands back: the first column of its first row where
    /// the server has `RETURNING`, `LAST_INSERT_ID(expr)` on MariaDB; `None` when it
    /// matched no row.
    fn value<'a, V: Values>(
        on: On<'a, Self>,
        s: &'a Statement<V>,
        a: &'a V::With<'a>,
    ) -> Fut<'a, Option<i64>>;

    /// Column `i` of `row` as a 64-bit integer, a 32-bit one, text, or a flag.
    fn int(row: &Self::Row, i: usize) -> Result<i64, sqlx::Error>;
    fn int32(row: &Self::Row, i: usize) -> Result<i32, sqlx::Error>;
    fn text(row: &Self::Row, i: usize) -> Result<String, sqlx::Error>;
    /// Column `i` of `row` as text that may be NULL.
    fn text_or_null(row: &Self::Row, i: usize) -> Result<Option<String>, sqlx::Error>;
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    fn flag(row: &Self::Row, i: usize) -> Result<bool, sqlx::Error>;
}

/// The grants of an acquisition (owner, token, expiry, holds, strategy, and where the
/// statement answers them, whether it recorded the handle's presence marker and a busy
/// holder's marker), run in an explicit transaction when `in_tx`.
pub(crate) async fn grants<'a, DB: Runner, V: Values>(
    pool: &'a sqlx::Pool<DB>,
    s: &'a Statement<V>,
    a: &'a V::With<'a>,
    in_tx: bool,
) -> Result<Vec<Grant>, sqlx::Error> {
    let rows = DB::rows(On::Pool(pool, in_tx), s, a).await?;
    rows.iter()
        .map(|r| {
            Ok(Grant {
                owner: DB::text(r, 0)?,
                token: DB::int(r, 1)?,
                expires_us: DB::int(r, 2)?,
                hold_count: DB::int32(r, 3)?,
                strategy: DB::text(r, 4)?,
                presence: marked::<DB>(r, 5)?,
                holder: match r.len() > 6 {
                    true => DB::text_or_null(r, 6)?,
                    false => None,
                },
            })
        })
        .collect()
}

/// Whether an acquisition's row says, in column `i`, that the lease recorded the
/// handle's presence marker (`Some(0)`; the strategy puts in the epoch): `None` when it
/// did not (the marker was not held as the statement ran), or the statement has no
/// such column (SQLite, where the marker is found by owner).
pub(crate) fn marked<DB: Runner>(row: &DB::Row, i: usize) -> Result<Option<u64>, sqlx::Error> {
    if row.len() <= i {
        return Ok(None);
    }
    Ok((DB::int(row, i)? != 0).then_some(0))
}

/// The rows of `list.sql` and `lookup.sql` (and of `semaphore_holders.sql`).
pub(crate) async fn listed<'a, DB: Runner, V: Values>(
    on: On<'a, DB>,
    s: &'a Statement<V>,
    a: &'a V::With<'a>,
) -> Result<Vec<Listed>, sqlx::Error> {
    let rows = DB::rows(on, s, a).await?;
    rows.iter()
        .map(|r| {
            Ok(Listed {
                key: DB::text(r, 0)?,
                strategy: DB::text(r, 1)?,
                owner: DB::text(r, 2)?,
                token: DB::int(r, 3)?,
                hold_count: DB::int32(r, 4)?,
                acquired_us: DB::int(r, 5)?,
                expires_us: DB::int(r, 6)?,
                now_us: DB::int(r, 7)?,
                waiters: DB::int(r, 8)?,
                // Not every listing says (a semaphore's holders, SQLite's rows, whose
                // markers are files: see `Sqlite::with_gone_holders`).
                gone: r.len() > 9 && DB::int(r, 9)? != 0,
            })
        })
        .collect()
}

/// The rows of `elect_leader.sql`.
pub(crate) async fn elected<'a, DB: Runner, V: Values>(
    pool: &'a sqlx::Pool<DB>,
    s: &'a Statement<V>,
    a: &'a V::With<'a>,
) -> Result<Vec<Elected>, sqlx::Error> {
    let rows = DB::rows(On::Pool(pool, false), s, a).await?;
    rows.iter()
        .map(|r| {
            Ok(Elected {
                owner: DB::text(r, 0)?,
                term: DB::int(r, 1)?,
                identity: DB::text(r, 2)?,
                acquired_us: DB::int(r, 3)?,
                expires_us: DB::int(r, 4)?,
                now_us: DB::int(r, 5)?,
            })
        })
        .collect()
}

/// The first column of every row `s` returns, as integers.
pub(crate) async fn ints<'a, DB: Runner, V: Values>(
    on: On<'a, DB>,
    s: &'a Statement<V>,
    a: &'a V::With<'a>,
) -> Result<Vec<i64>, sqlx::Error> {
    let rows = DB::rows(on, s, a).await?;
    rows.iter().map(|r| DB::int(r, 0)).collect()
}

/// The first column of every row `s` returns, as text.
pub(crate) async fn texts<'a, DB: Runner, V: Values>(
    on: On<'a, DB>,
    s: &'a Statement<V>,
    a: &'a V::With<'a>,
) -> Result<Vec<String>, sqlx::Error> {
    let rows = DB::rows(on, s, a).await?;
    rows.iter().map(|r| DB::text(r, 0)).collect()
}

/// Runs `$run` (a query on the executor `$ex`, its text as `$sent` asks: see
/// `durability.rs`) where `$on` says. On a pool, a pinned statement runs in a
/// transaction of its own: behind a transaction-pooling proxy such as PgBouncer, only
/// an open transaction keeps sqlx's separate parse and execute round trips on one
/// server connection.
macro_rules! on {
    ($on:expr, $s:expr, |$ex:ident, $sent:ident| $run:expr) => {{
        crate::support::metrics::statement_sent($s.table(), $s.is_wake_lock());
        match $on {
            On::Conn(conn) => {
                let $ex = conn;
                let $sent = Sent::Within;
                $run.await
            }
            On::Pool(pool, in_tx) if in_tx || $s.is_pinned() => {
                note_room(pool);
                let mut tx = pool.begin().await?;
                checked_out();
                let outcome = {
                    let $ex = &mut *tx;
                    let $sent = Sent::Alone;
                    $run.await
                };
                match outcome {
                    Ok(out) => {
                        tx.commit().await?;
                        Ok(out)
                    }
                    Err(e) => {
                        // The statement's error is the one to report; a connection
                        // that cannot roll back is closed by the pool.
                        let _ = tx.rollback().await;
                        Err(e)
                    }
                }
            }
            On::Pool(pool, _) => {
                note_room(pool);
                let mut conn = pool.acquire().await?;
                checked_out();
                let $ex = &mut *conn;
                let $sent = Sent::Alone;
                $run.await
            }
        }
    }};
}

/// The value a statement hands back on executor `$ex`, by server.
macro_rules! value {
    (last_insert_id, $db:ty, $s:expr, $a:expr, $ex:expr, $sent:expr) => {{
        let r = $s.bind_sent::<$db>($a, $sent).execute($ex).await?;
        Ok((r.rows_affected() > 0).then(|| i64::try_from(r.last_insert_id()).unwrap_or(i64::MAX)))
    }};
    // Read to the end of the response, not just the first row: an autocommit
    // statement's COMMIT may still fail after its row was sent (SQLite stops a
    // statement after the first row otherwise, and a failed commit would go unseen).
    (returning, $db:ty, $s:expr, $a:expr, $ex:expr, $sent:expr) => {{
        match $s.bind_sent::<$db>($a, $sent).fetch_all($ex).await?.first() {
            Some(row) => Ok(Some(row.try_get::<i64, _>(0)?)),
            None => Ok(None),
        }
    }};
}

macro_rules! runner {
    ($db:ty, $values:ident) => {
        impl Runner for $db {
            fn rows<'a, V: Values>(
                on: On<'a, Self>,
                s: &'a Statement<V>,
                a: &'a V::With<'a>,
            ) -> Fut<'a, Vec<Self::Row>> {
                Box::pin(
                    async move { on!(on, s, |ex, sent| s.bind_sent::<$db>(a, sent).fetch_all(ex)) },
                )
            }

            fn execute<'a, V: Values>(
                on: On<'a, Self>,
                s: &'a Statement<V>,
                a: &'a V::With<'a>,
            ) -> Fut<'a, u64> {
                Box::pin(async move {
                    on!(on, s, |ex, sent| async {
                        Ok(s.bind_sent::<$db>(a, sent)
                            .execute(ex)
                            .await?
                            .rows_affected())
                    })
                })
            }

            fn value<'a, V: Values>(
                on: On<'a, Self>,
                s: &'a Statement<V>,
                a: &'a V::With<'a>,
            ) -> Fut<'a, Option<i64>> {
                Box::pin(async move {
                    on!(on, s, |ex, sent| async {
                        value!($values, $db, s, a, ex, sent)
                    })
                })
            }

            fn int(row: &Self::Row, i: usize) -> Result<i64, sqlx::Error> {
                row.try_get(i)
            }

            fn int32(row: &Self::Row, i: usize) -> Result<i32, sqlx::Error> {
                row.try_get(i)
            }

            fn text(row: &Self::Row, i: usize) -> Result<String, sqlx::Error> {
                row.try_get(i)
            }

            fn text_or_null(row: &Self::Row, i: usize) -> Result<Option<String>, sqlx::Error> {
                row.try_get(i)
            }

            fn flag(row: &Self::Row, i: usize) -> Result<bool, sqlx::Error> {
                row.try_get(i)
            }
        }
    };
}

#[cfg(feature = "postgres")]
runner!(sqlx::Postgres, returning);
#[cfg(feature = "mysql")]
runner!(sqlx::MySql, last_insert_id);
#[cfg(feature = "sqlite")]
runner!(sqlx::Sqlite, returning);
