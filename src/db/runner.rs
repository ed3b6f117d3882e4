//! Running rendered statements: one trait, [`Runner`], implemented for each sqlx
//! database sqlock supports, so that the code above names one bound instead of the
//! many sqlx's generic executors need.
//!
//! The implementations are stamped out by a macro with the concrete database type, so
//! sqlx's bounds are met there once. Statements run on a pool, each on a pooled
//! connection (in a transaction of its own when the statement is pinned for a
//! transaction-pooling proxy), or on a connection whose transaction the caller holds.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sqlx::Row as _;

use super::statement::{Statement, Values};

use super::outcome::{Grant, Listed};

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

/// A boxed, `Send` future of a statement's outcome.
pub(crate) type Fut<'a, T> = Pin<Box<dyn Future<Output = Result<T, sqlx::Error>> + Send + 'a>>;

/// A sqlx database sqlock runs its statements on.
pub(crate) trait Runner: sqlx::Database {
    /// Runs `s` on a pooled connection for its effect: the rows it matched (sqlx
    /// connects to MariaDB with CLIENT_FOUND_ROWS, so a matched row that a statement
    /// left unchanged counts too).
    fn execute<'a, V: Values>(
        pool: &'a sqlx::Pool<Self>,
        s: &'a Statement<V>,
        a: &'a V::With<'a>,
    ) -> Fut<'a, u64>;

    /// Runs an acquisition, whose rows are grants (owner, token, expiry, holds), in an
    /// explicit transaction when `in_tx`. Reads to the end of the response, not just to
    /// the first row: an autocommit statement's COMMIT may still fail after its rows
    /// were sent (a Galera certification failure, a serialization failure), and a
    /// grant whose commit failed is no grant.
    fn fetch_grants<'a, V: Values>(
        pool: &'a sqlx::Pool<Self>,
        s: &'a Statement<V>,
        a: &'a V::With<'a>,
        in_tx: bool,
    ) -> Fut<'a, Vec<Grant>>;

    /// The first column of every row `s` returns, as integers.
    fn fetch_i64s<'a, V: Values>(
        pool: &'a sqlx::Pool<Self>,
        s: &'a Statement<V>,
        a: &'a V::With<'a>,
    ) -> Fut<'a, Vec<i64>>;

    /// The first column of every row `s` returns, as text.
    fn fetch_strings<'a, V: Values>(
        pool: &'a sqlx::Pool<Self>,
        s: &'a Statement<V>,
        a: &'a V::With<'a>,
    ) -> Fut<'a, Vec<String>>;

    /// The rows of `list.sql`.
    fn fetch_listed<'a, V: Values>(
        pool: &'a sqlx::Pool<Self>,
        s: &'a Statement<V>,
        a: &'a V::With<'a>,
    ) -> Fut<'a, Vec<Listed>>;

    /// The one value a statement hands back: the first column of its first row where
    /// the dialect has `RETURNING`, `LAST_INSERT_ID(expr)` on MariaDB; `None` when it
    /// matched no row.
    fn fetch_value<'a, V: Values>(
        pool: &'a sqlx::Pool<Self>,
        s: &'a Statement<V>,
        a: &'a V::With<'a>,
    ) -> Fut<'a, Option<i64>>;

    /// Runs `s` on `conn` (inside the caller's transaction) for its effect: the rows it
    /// matched.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    fn execute_on<'a, V: Values>(
        conn: &'a mut Self::Connection,
        s: &'a Statement<V>,
        a: &'a V::With<'a>,
    ) -> Fut<'a, u64>;

    /// Whether `s` returns a row on `conn`.
    fn exists_on<'a, V: Values>(
        conn: &'a mut Self::Connection,
        s: &'a Statement<V>,
        a: &'a V::With<'a>,
    ) -> Fut<'a, bool>;

    /// The first column of every row `s` returns on `conn`, as text.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    fn strings_on<'a, V: Values>(
        conn: &'a mut Self::Connection,
        s: &'a Statement<V>,
        a: &'a V::With<'a>,
    ) -> Fut<'a, Vec<String>>;

    /// The first row of `s` on `conn` as a text and a boolean column.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    fn text_and_flag_on<'a, V: Values>(
        conn: &'a mut Self::Connection,
        s: &'a Statement<V>,
        a: &'a V::With<'a>,
    ) -> Fut<'a, (String, bool)>;

    /// [`fetch_value`](Self::fetch_value) on `conn`.
    fn value_on<'a, V: Values>(
        conn: &'a mut Self::Connection,
        s: &'a Statement<V>,
        a: &'a V::With<'a>,
    ) -> Fut<'a, Option<i64>>;
}

/// Runs `$run` (a query on the executor `$ex`) on `$pool`. A pinned statement runs in
/// a transaction of its own: behind a transaction-pooling proxy such as PgBouncer, only
/// an open transaction keeps sqlx's separate parse and execute round trips on one
/// server connection.
macro_rules! on_pool {
    ($pool:expr, $in_tx:expr, |$ex:ident| $run:expr) => {{
        if $in_tx {
            let mut tx = $pool.begin().await?;
            checked_out();
            let outcome = {
                let $ex = &mut *tx;
                $run.await
            };
            match outcome {
                Ok(out) => {
                    tx.commit().await?;
                    Ok(out)
                }
                Err(e) => {
                    // The statement's error is the one to report; a connection that
                    // cannot roll back is closed by the pool.
                    let _ = tx.rollback().await;
                    Err(e)
                }
            }
        } else {
            let mut conn = $pool.acquire().await?;
            checked_out();
            let $ex = &mut *conn;
            $run.await
        }
    }};
}

/// The value a statement hands back on executor `$ex`, by dialect.
macro_rules! value {
    (last_insert_id, $db:ty, $s:expr, $a:expr, $ex:expr) => {{
        let r = $s.bind::<$db>($a).execute($ex).await?;
        Ok((r.rows_affected() > 0).then(|| i64::try_from(r.last_insert_id()).unwrap_or(i64::MAX)))
    }};
    // Read to the end of the response, not just the first row: an autocommit
    // statement's COMMIT may still fail after its row was sent (SQLite stops a
    // statement after the first row otherwise, and a failed commit would go unseen).
    (returning, $db:ty, $s:expr, $a:expr, $ex:expr) => {{
        match $s.bind::<$db>($a).fetch_all($ex).await?.first() {
            Some(row) => Ok(Some(row.try_get::<i64, _>(0)?)),
            None => Ok(None),
        }
    }};
}

macro_rules! runner {
    ($db:ty, $values:ident) => {
        impl Runner for $db {
            fn execute<'a, V: Values>(
                pool: &'a sqlx::Pool<Self>,
                s: &'a Statement<V>,
                a: &'a V::With<'a>,
            ) -> Fut<'a, u64> {
                Box::pin(async move {
                    on_pool!(pool, s.is_pinned(), |ex| async {
                        Ok(s.bind::<$db>(a).execute(ex).await?.rows_affected())
                    })
                })
            }

            fn fetch_grants<'a, V: Values>(
                pool: &'a sqlx::Pool<Self>,
                s: &'a Statement<V>,
                a: &'a V::With<'a>,
                in_tx: bool,
            ) -> Fut<'a, Vec<Grant>> {
                Box::pin(async move {
                    let rows = on_pool!(pool, in_tx || s.is_pinned(), |ex| s
                        .bind::<$db>(a)
                        .fetch_all(ex))?;
                    rows.iter()
                        .map(|r| {
                            Ok(Grant {
                                owner: r.try_get(0)?,
                                token: r.try_get(1)?,
                                expires_us: r.try_get(2)?,
                                hold_count: r.try_get(3)?,
                                strategy: r.try_get(4)?,
                            })
                        })
                        .collect()
                })
            }

            fn fetch_i64s<'a, V: Values>(
                pool: &'a sqlx::Pool<Self>,
                s: &'a Statement<V>,
                a: &'a V::With<'a>,
            ) -> Fut<'a, Vec<i64>> {
                Box::pin(async move {
                    let rows = on_pool!(pool, s.is_pinned(), |ex| s.bind::<$db>(a).fetch_all(ex))?;
                    rows.iter().map(|r| r.try_get(0)).collect()
                })
            }

            fn fetch_strings<'a, V: Values>(
                pool: &'a sqlx::Pool<Self>,
                s: &'a Statement<V>,
                a: &'a V::With<'a>,
            ) -> Fut<'a, Vec<String>> {
                Box::pin(async move {
                    let rows = on_pool!(pool, s.is_pinned(), |ex| s.bind::<$db>(a).fetch_all(ex))?;
                    rows.iter().map(|r| r.try_get(0)).collect()
                })
            }

            fn fetch_listed<'a, V: Values>(
                pool: &'a sqlx::Pool<Self>,
                s: &'a Statement<V>,
                a: &'a V::With<'a>,
            ) -> Fut<'a, Vec<Listed>> {
                Box::pin(async move {
                    let rows = on_pool!(pool, s.is_pinned(), |ex| s.bind::<$db>(a).fetch_all(ex))?;
                    rows.iter()
                        .map(|r| {
                            Ok(Listed {
                                key: r.try_get(0)?,
                                strategy: r.try_get(1)?,
                                owner: r.try_get(2)?,
                                token: r.try_get(3)?,
                                hold_count: r.try_get(4)?,
                                acquired_us: r.try_get(5)?,
                                expires_us: r.try_get(6)?,
                                now_us: r.try_get(7)?,
                            })
                        })
                        .collect()
                })
            }

            fn fetch_value<'a, V: Values>(
                pool: &'a sqlx::Pool<Self>,
                s: &'a Statement<V>,
                a: &'a V::With<'a>,
            ) -> Fut<'a, Option<i64>> {
                Box::pin(async move {
                    on_pool!(pool, s.is_pinned(), |ex| async {
                        value!($values, $db, s, a, ex)
                    })
                })
            }

            fn execute_on<'a, V: Values>(
                conn: &'a mut Self::Connection,
                s: &'a Statement<V>,
                a: &'a V::With<'a>,
            ) -> Fut<'a, u64> {
                Box::pin(async move { Ok(s.bind::<$db>(a).execute(conn).await?.rows_affected()) })
            }

            fn exists_on<'a, V: Values>(
                conn: &'a mut Self::Connection,
                s: &'a Statement<V>,
                a: &'a V::With<'a>,
            ) -> Fut<'a, bool> {
                Box::pin(async move { Ok(s.bind::<$db>(a).fetch_optional(conn).await?.is_some()) })
            }

            fn strings_on<'a, V: Values>(
                conn: &'a mut Self::Connection,
                s: &'a Statement<V>,
                a: &'a V::With<'a>,
            ) -> Fut<'a, Vec<String>> {
                Box::pin(async move {
                    let rows = s.bind::<$db>(a).fetch_all(conn).await?;
                    rows.iter().map(|r| r.try_get(0)).collect()
                })
            }

            fn text_and_flag_on<'a, V: Values>(
                conn: &'a mut Self::Connection,
                s: &'a Statement<V>,
                a: &'a V::With<'a>,
            ) -> Fut<'a, (String, bool)> {
                Box::pin(async move {
                    let row = s.bind::<$db>(a).fetch_one(conn).await?;
                    Ok((row.try_get(0)?, row.try_get(1)?))
                })
            }

            fn value_on<'a, V: Values>(
                conn: &'a mut Self::Connection,
                s: &'a Statement<V>,
                a: &'a V::With<'a>,
            ) -> Fut<'a, Option<i64>> {
                Box::pin(async move { value!($values, $db, s, a, conn) })
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
