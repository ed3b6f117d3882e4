//! Wake locks' statements: a native lock per held key that the holder keeps on a
//! connection of its handle's own and lets go once its release has committed, and
//! that waiters of other processes wait for inside the server (`wake_*.sql`; the
//! keeper that runs them is `keepers/wake_lock.rs`, the waits `keepers/server_wait.rs`).
//!
//! A wake lock only wakes: the lock row stays the truth, so a wake lock that is
//! missing, late, or kept by a holder whose lease lapsed costs a waiter its poll, never
//! a grant. On PostgreSQL it is a session advisory lock, on MariaDB a `GET_LOCK` name,
//! on SQLite a file lock on one of 4096 files in a folder beside the database
//! (`<file>-sqlock-wake/`), which waiters try every millisecond, a system call and no
//! statement (an in-memory database has none; its waiters are all in one process, where
//! `keepers/wake.rs` wakes them). A transaction-pooling proxy keeps no session: none.

#[cfg(any(feature = "postgres", feature = "mysql"))]
use super::backend::{sql, Backend};
#[cfg(any(feature = "postgres", feature = "mysql"))]
use super::presence::target;
use super::presence::Conn;
#[cfg(any(feature = "postgres", feature = "mysql"))]
use super::runner::{On, Runner};
#[cfg(any(feature = "postgres", feature = "mysql"))]
use super::statement::Statement;
use super::values::{WakeName, WakeWait};
use super::Db;
use crate::support::error::Error;

/// How long a wake lock's take or let-go may take on the client's clock before its
/// connection counts as lost: the take waits 200 ms at most in the server.
const STEP_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

/// What a wait for a key's wake lock found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WakeAnswer {
    /// The holder let it go while the waiter waited: the key was released.
    Freed,
    /// Nobody held it as the wait began: the holder keeps none (yet).
    NotHeld,
    /// Still held when the wait ran out.
    Held,
}

/// A key's wake lock statements, rendered once for a handle's table; SQLite's folder.
#[derive(Debug)]
pub(crate) enum WakeStatements {
    #[cfg(feature = "sqlite")]
    Files { dir: std::path::PathBuf },
    #[cfg(feature = "postgres")]
    Postgres {
        hold: Statement<WakeName<'static>>,
        free: Statement<WakeName<'static>>,
        wait: Statement<WakeWait<'static>>,
    },
    #[cfg(feature = "mysql")]
    MySql {
        hold: Statement<WakeName<'static>>,
        free: Statement<WakeName<'static>>,
        wait: Statement<WakeWait<'static>>,
    },
}

/// The name a key's wake lock is known by on the server, beside the schema or
/// database the statements add: the table and the key (a table name holds no `:`).
pub(crate) fn wake_name(db: &Db, key: &str) -> String {
    format!("{}:{key}", db.table().as_str())
}

impl Db {
    /// The wake lock statements for this handle's table, or `None` where there are no
    /// wake locks: SQLite, and a transaction-pooling proxy.
    pub(crate) fn wake_statements(&self) -> Option<WakeStatements> {
        match self {
            #[cfg(feature = "postgres")]
            Db::Postgres(b) => {
                if b.common().fence.is_pinned() {
                    return None;
                }
                const PG: super::Dialect = super::Dialect::Postgres;
                Some(WakeStatements::Postgres {
                    hold: target(b.table(), PG, sql!("postgres", "wake_hold"))
                        .counted_as_wake_lock(),
                    free: target(b.table(), PG, sql!("postgres", "wake_free"))
                        .counted_as_wake_lock(),
                    wait: target(b.table(), PG, sql!("postgres", "wake_wait"))
                        .counted_as_wake_lock(),
                })
            }
            #[cfg(feature = "mysql")]
            Db::MySql(b) => {
                const MY: super::Dialect = super::Dialect::MySql;
                Some(WakeStatements::MySql {
                    hold: target(b.table(), MY, sql!("mysql", "wake_hold")).counted_as_wake_lock(),
                    free: target(b.table(), MY, sql!("mysql", "wake_free")).counted_as_wake_lock(),
                    wait: target(b.table(), MY, sql!("mysql", "wake_wait")).counted_as_wake_lock(),
                })
            }
            #[cfg(feature = "sqlite")]
            Db::Sqlite(b) => {
                // Beside the presence markers' folder: `<file>-sqlock-wake`.
                let markers = b.markers()?.to_string_lossy().into_owned();
                let dir = markers.strip_suffix("-presence")?.to_owned() + "-wake";
                Some(WakeStatements::Files { dir: dir.into() })
            }
        }
    }

    /// Whether the server rules wake locks out: a node of a Galera cluster, where a
    /// `GET_LOCK` name is held on one node only (asked once per backend).
    pub(crate) async fn wake_locks_ruled_out(&self) -> Result<bool, Error> {
        match self {
            #[cfg(feature = "mysql")]
            Db::MySql(b) => Ok(b
                .galera_cluster_size()
                .await
                .map_err(|e| b.failure(e).error)?
                .is_some()),
            #[allow(unreachable_patterns)]
            _ => Ok(false),
        }
    }
}

impl WakeStatements {
    /// SQLite's folder of wake files, where wake locks are files rather than locks of a
    /// server's sessions.
    #[cfg(feature = "sqlite")]
    pub(crate) fn files(&self) -> Option<&std::path::Path> {
        match self {
            #[cfg(feature = "sqlite")]
            Self::Files { dir } => Some(dir),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// Takes the wake lock named `wake` on `conn`, waiting 200 ms at most: whether it
    /// is held now (a connection holds each name as often as it took it).
    pub(crate) async fn hold(&self, conn: &mut Conn, wake: &str) -> Result<bool, sqlx::Error> {
        let values = WakeName { wake };
        let step = async {
            match (self, conn) {
                #[cfg(feature = "postgres")]
                (Self::Postgres { hold, .. }, Conn::Postgres(conn)) => {
                    match sqlx::Postgres::rows(On::Conn(conn), hold, &values).await {
                        Ok(rows) => Ok(!rows.is_empty()),
                        // lock_timeout: held by another session (a holder whose lease
                        // lapsed, or a waiter's moment).
                        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("55P03") => {
                            Ok(false)
                        }
                        Err(e) => Err(e),
                    }
                }
                #[cfg(feature = "mysql")]
                (Self::MySql { hold, .. }, Conn::MySql { conn, .. }) => {
                    let rows = sqlx::MySql::rows(On::Conn(conn), hold, &values).await?;
                    one(&rows)
                }
                #[allow(unreachable_patterns)]
                _ => Err(other_server()),
            }
        };
        bounded(step).await
    }

    /// Lets the wake lock named `wake` go on `conn` (once): whether `conn` held it.
    pub(crate) async fn free(&self, conn: &mut Conn, wake: &str) -> Result<bool, sqlx::Error> {
        let values = WakeName { wake };
        let step = async {
            match (self, conn) {
                #[cfg(feature = "postgres")]
                (Self::Postgres { free, .. }, Conn::Postgres(conn)) => {
                    let rows = sqlx::Postgres::rows(On::Conn(conn), free, &values).await?;
                    match rows.first() {
                        Some(row) => sqlx::Postgres::flag(row, 0),
                        None => Ok(false),
                    }
                }
                #[cfg(feature = "mysql")]
                (Self::MySql { free, .. }, Conn::MySql { conn, .. }) => {
                    let rows = sqlx::MySql::rows(On::Conn(conn), free, &values).await?;
                    one(&rows)
                }
                #[allow(unreachable_patterns)]
                _ => Err(other_server()),
            }
        };
        bounded(step).await
    }

    /// Waits on `conn`, for `wait` at most, for the wake lock named `wake` to be let
    /// go by its holder, and lets it go at once (`wake_wait.sql`). An error: the
    /// connection failed, or ended. Cancel-safe as a presence wait: dropped, it leaves
    /// the connection in an unknown state, to be closed.
    pub(crate) async fn wait(
        &self,
        conn: &mut Conn,
        wake: &str,
        wait: std::time::Duration,
    ) -> Result<WakeAnswer, sqlx::Error> {
        let values = WakeWait {
            wake,
            wait_us: i64::try_from(wait.as_micros()).unwrap_or(i64::MAX),
        };
        let answer = |n: i64| match n {
            2 => WakeAnswer::NotHeld,
            1 => WakeAnswer::Freed,
            _ => WakeAnswer::Held,
        };
        match (self, conn) {
            #[cfg(feature = "postgres")]
            (Self::Postgres { wait, .. }, Conn::Postgres(conn)) => {
                match sqlx::Postgres::rows(On::Conn(conn), wait, &values).await {
                    Ok(rows) => match rows.first() {
                        Some(row) => Ok(answer(sqlx::Postgres::int(row, 0)?)),
                        None => Ok(WakeAnswer::Held),
                    },
                    // lock_timeout: still held.
                    Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("55P03") => {
                        Ok(WakeAnswer::Held)
                    }
                    Err(e) => Err(e),
                }
            }
            #[cfg(feature = "mysql")]
            (Self::MySql { wait, .. }, Conn::MySql { conn, .. }) => {
                let rows = sqlx::MySql::rows(On::Conn(conn), wait, &values).await?;
                Ok(match rows.first() {
                    Some(row) => answer(sqlx::MySql::int(row, 0)?),
                    None => WakeAnswer::Held,
                })
            }
            #[allow(unreachable_patterns)]
            _ => Err(other_server()),
        }
    }
}

/// A take or a let-go, bounded on the client's clock.
async fn bounded<T>(
    step: impl std::future::Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, sqlx::Error> {
    match tokio::time::timeout(STEP_LIMIT, step).await {
        Ok(done) => done,
        Err(_) => Err(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "a wake lock's statement did not answer in time",
        ))),
    }
}

/// Whether a MariaDB answer's first column is 1.
#[cfg(feature = "mysql")]
fn one(rows: &[sqlx::mysql::MySqlRow]) -> Result<bool, sqlx::Error> {
    super::presence::got_lock(rows)
}

/// A connection of another server than the statements' (never, in practice).
#[allow(dead_code)]
fn other_server() -> sqlx::Error {
    sqlx::Error::Protocol("a wake lock connection of another server".into())
}

/// How often a waiter tries a wake file.
#[cfg(feature = "sqlite")]
const FILE_TRY_EVERY: std::time::Duration = std::time::Duration::from_millis(1);

/// The wake file of the wake lock named `wake` in `dir`: one of 4096, by a hash every
/// process computes alike (FNV-1a); two keys that share one cost a waiter a wait for
/// the other's holder, bounded by its pause.
#[cfg(feature = "sqlite")]
fn wake_file(dir: &std::path::Path, wake: &str) -> std::path::PathBuf {
    let hash = wake.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    dir.join(format!("{:03x}", hash % 4096))
}

/// Takes the wake file of `wake` in `dir` without waiting: the open file, locked
/// until dropped, or `None` when another holds it (a hold of a key that shares the
/// file, or a holder whose lease lapsed).
#[cfg(feature = "sqlite")]
pub(crate) fn take_file(
    dir: &std::path::Path,
    wake: &str,
) -> std::io::Result<Option<std::fs::File>> {
    std::fs::create_dir_all(dir)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(wake_file(dir, wake))?;
    Ok(fs4::fs_std::FileExt::try_lock_exclusive(&file)?.then_some(file))
}

/// Waits, for `wait` at most, for the wake file of `wake` in `dir` to be let go by its
/// holder, trying it every [`FILE_TRY_EVERY`] in the shared form, which holds no holder
/// up.
#[cfg(feature = "sqlite")]
pub(crate) async fn wait_file(
    dir: &std::path::Path,
    wake: &str,
    wait: std::time::Duration,
) -> WakeAnswer {
    use fs4::fs_std::FileExt;
    let Ok(file) = std::fs::File::open(wake_file(dir, wake)) else {
        return WakeAnswer::NotHeld;
    };
    let until = tokio::time::Instant::now() + wait;
    let mut first = true;
    loop {
        match FileExt::try_lock_shared(&file) {
            Ok(true) => {
                let _ = FileExt::unlock(&file);
                return if first {
                    WakeAnswer::NotHeld
                } else {
                    WakeAnswer::Freed
                };
            }
            Ok(false) => {}
            Err(_) => return WakeAnswer::Held,
        }
        first = false;
        if tokio::time::Instant::now() >= until {
            return WakeAnswer::Held;
        }
        tokio::time::sleep(FILE_TRY_EVERY).await;
    }
}
