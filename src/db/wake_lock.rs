//! Wake locks' statements: a native lock per held key that the holder keeps on a
//! connection of its handle's own and lets go once its release has committed, and
//! that waiters of other processes wait for inside the server (`wake_*.sql`; the
//! keeper that runs them is `keepers/wake_lock.rs`, the waits `keepers/server_wait.rs`).
//!
//! A wake lock only wakes: the lock row stays the truth, so a wake lock that is
//! missing, late, or kept by a holder whose lease lapsed costs a waiter its poll, never
//! a grant. On PostgreSQL it is a session advisory lock, on MariaDB a `GET_LOCK` name,
//! on SQLite a file lock on one of 4096 files in a folder beside the database
//! (`<file>-sqlock-wake/`), which a thread of the waiter's process waits for in the
//! kernel, a blocked system call and no statement (an in-memory database has none; its waiters are all in one process, where
//! `keepers/wake.rs` wakes them). A transaction-pooling proxy keeps no session: none.
//!
//! A key's waiters take turns: a wait takes the key's *wake turn* (another native lock
//! of the same name; on SQLite the wake file's twin) before it waits for the wake
//! lock, and keeps it until [`WakeStatements::leave`] (on SQLite until the file is
//! closed), so that a release wakes one waiter.

#[cfg(any(feature = "postgres", feature = "mysql"))]
use super::backend::{sql, Backend};
#[cfg(any(feature = "postgres", feature = "mysql"))]
use super::presence::target;
use super::presence::Conn;
#[cfg(any(feature = "postgres", feature = "mysql"))]
use super::runner::{On, Runner};
#[cfg(any(feature = "postgres", feature = "mysql"))]
use super::statement::Statement;
#[cfg(any(feature = "postgres", feature = "mysql"))]
use super::values::Nothing;
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
        wait_all: Statement<WakeWait<'static>>,
        leave: Statement<Nothing>,
    },
    #[cfg(feature = "mysql")]
    MySql {
        hold: Statement<WakeName<'static>>,
        free: Statement<WakeName<'static>>,
        wait: Statement<WakeWait<'static>>,
        wait_all: Statement<WakeWait<'static>>,
        leave: Statement<Nothing>,
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
                    wait_all: target(b.table(), PG, sql!("postgres", "wake_wait_all"))
                        .counted_as_wake_lock(),
                    leave: target(b.table(), PG, sql!("postgres", "wake_leave"))
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
                    wait_all: target(b.table(), MY, sql!("mysql", "wake_wait_all"))
                        .counted_as_wake_lock(),
                    leave: target(b.table(), MY, sql!("mysql", "wake_leave"))
                        .counted_as_wake_lock(),
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

    /// Waits on `conn`, for `wait` at most, for the key's wake turn and then for the
    /// wake lock named `wake` to be let go by its holder, and lets the lock go at once
    /// (`wake_wait.sql`); the turn is kept, whatever the answer, until
    /// [`leave`](Self::leave) (or the connection's end). Without `turns` (a shared
    /// hold's waiter: every such waiter may be granted at once), no turn is taken and
    /// every waiter of the key wakes at the release (`wake_wait_all.sql`). An error: the
    /// connection failed, or ended. Cancel-safe as a presence wait: dropped, it leaves
    /// the connection in an unknown state, to be closed.
    pub(crate) async fn wait(
        &self,
        conn: &mut Conn,
        wake: &str,
        wait: std::time::Duration,
        turns: bool,
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
            (Self::Postgres { wait, wait_all, .. }, Conn::Postgres(conn)) => {
                let wait = if turns { wait } else { wait_all };
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
            (Self::MySql { wait, wait_all, .. }, Conn::MySql { conn, .. }) => {
                let wait = if turns { wait } else { wait_all };
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

impl WakeStatements {
    /// Lets the connection's wake turns go (`wake_leave.sql`), once the attempt that
    /// followed its wait has answered or its wait ran out: the next waiter of the key
    /// starts waiting for the wake lock. A wait connection holds nothing else.
    pub(crate) async fn leave(&self, conn: &mut Conn) -> Result<(), sqlx::Error> {
        let step = async {
            match (self, conn) {
                #[cfg(feature = "postgres")]
                (Self::Postgres { leave, .. }, Conn::Postgres(conn)) => {
                    sqlx::Postgres::rows(On::Conn(conn), leave, &Nothing).await?;
                    Ok(())
                }
                #[cfg(feature = "mysql")]
                (Self::MySql { leave, .. }, Conn::MySql { conn, .. }) => {
                    sqlx::MySql::rows(On::Conn(conn), leave, &Nothing).await?;
                    Ok(())
                }
                #[allow(unreachable_patterns)]
                _ => Err(other_server()),
            }
        };
        bounded(step).await
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

/// How often a waiter tries a wake file's turn.
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
/// holder, in the shared form, which holds no holder up: tried once, then waited for
/// by this process's thread for the file ([`watch_file`]). First takes the wake turn,
/// the file's twin (`<file>q`), exclusively, tried every [`FILE_TRY_EVERY`], unless
/// `turn` holds it already: only the waiter whose turn it is waits for the wake file,
/// and the turn stays in `turn`, locked until dropped. With no `turn` (a shared hold's
/// waiter), no turn is taken.
#[cfg(feature = "sqlite")]
pub(crate) async fn wait_file(
    dir: &std::path::Path,
    wake: &str,
    wait: std::time::Duration,
    turn: Option<&mut Option<std::fs::File>>,
) -> WakeAnswer {
    use fs4::fs_std::FileExt;
    let Ok(file) = std::fs::File::open(wake_file(dir, wake)) else {
        return WakeAnswer::NotHeld;
    };
    let until = tokio::time::Instant::now() + wait;
    if let Some(turn @ None) = turn {
        let mut name = wake_file(dir, wake).into_os_string();
        name.push("q");
        let Ok(queue) = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(name)
        else {
            return WakeAnswer::NotHeld;
        };
        loop {
            match FileExt::try_lock_exclusive(&queue) {
                Ok(true) => break,
                Ok(false) => {}
                Err(_) => return WakeAnswer::Held,
            }
            if tokio::time::Instant::now() >= until {
                return WakeAnswer::Held;
            }
            tokio::time::sleep(FILE_TRY_EVERY).await;
        }
        *turn = Some(queue);
    }
    match FileExt::try_lock_shared(&file) {
        Ok(true) => {
            let _ = FileExt::unlock(&file);
            return WakeAnswer::NotHeld;
        }
        Ok(false) => {}
        Err(_) => return WakeAnswer::Held,
    }
    let Some(mut freed) = watch_file(wake_file(dir, wake)) else {
        return WakeAnswer::Held;
    };
    let let_go = matches!(
        tokio::time::timeout_at(until, freed.wait_for(|f| *f)).await,
        Ok(Ok(_))
    );
    if let_go {
        WakeAnswer::Freed
    } else {
        WakeAnswer::Held
    }
}

/// Per wake file of this process that a holder of another keeps locked, the news of
/// its let-go, from the one thread that waits for it ([`watch_file`]).
#[cfg(feature = "sqlite")]
type Watchers = std::collections::HashMap<std::path::PathBuf, tokio::sync::watch::Receiver<bool>>;

#[cfg(feature = "sqlite")]
fn watchers() -> std::sync::MutexGuard<'static, Watchers> {
    static WATCHERS: std::sync::OnceLock<std::sync::Mutex<Watchers>> = std::sync::OnceLock::new();
    WATCHERS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The news of `path`'s let-go (`true` once let go), from a thread of this process
/// that waits for it in the kernel, blocked on a shared lock of the file, which the
/// holder's let-go grants at once: started by the first waiter, shared by every waiter
/// of the file that comes while it waits, and ended by the let-go (so a thread lasts
/// as long as a hold that some waiter watched, and there are at most as many as there
/// are wake files, 4096). `None` when no thread could be started.
#[cfg(feature = "sqlite")]
fn watch_file(path: std::path::PathBuf) -> Option<tokio::sync::watch::Receiver<bool>> {
    use fs4::fs_std::FileExt;
    let mut all = watchers();
    if let Some(rx) = all.get(&path) {
        return Some(rx.clone());
    }
    let file = std::fs::File::open(&path).ok()?;
    let (tx, rx) = tokio::sync::watch::channel(false);
    let watched = path.clone();
    let started = std::thread::Builder::new()
        .name("sqlock-wake-file".into())
        .spawn(move || {
            // Blocks until no holder keeps the file; an error (a signal) ends the
            // watch as a let-go would: its waiters try, and find the key busy.
            let _ = FileExt::lock_shared(&file);
            let _ = FileExt::unlock(&file);
            watchers().remove(&watched);
            let _ = tx.send(true);
        });
    if started.is_err() {
        return None;
    }
    all.insert(path, rx.clone());
    Some(rx)
}
