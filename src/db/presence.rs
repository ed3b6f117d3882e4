//! Presence markers: what a handle holds, for as long as its process lives, to tell
//! the others that its leases are not orphaned (see `LockerBuilder::presence`).
//!
//! On PostgreSQL a marker is a session advisory lock, on MariaDB a `GET_LOCK` name,
//! each held by a connection the handle keeps for it alone (opened with the pool's
//! connect options, outside the pool): when the process dies the server ends the
//! connection and the marker is free. On SQLite it is a file lock on a file named
//! for the owner, in a folder beside the database file: the operating system frees it
//! when the process dies. An acquisition may take a live lease whose owner's marker is
//! free: inside its statement on the servers, through [`gone_owner`] on SQLite.

use crate::support::error::Error;
#[cfg(feature = "sqlite")]
use std::path::{Path, PathBuf};

use super::backend::{sql, Backend};
use super::runner::{On, Runner};
use super::statement::{Mode, Statement, Target};
use super::values::Marker;
use super::Db;

/// How many random marker keys a PostgreSQL handle draws before it gives up: one is
/// taken by another session only by a chance of about one in two billion per session.
#[cfg(feature = "postgres")]
const DRAWS: u32 = 8;

/// A handle's presence: the connection (or file) that holds its marker.
#[derive(Debug)]
pub(crate) enum Session {
    #[cfg(feature = "postgres")]
    Postgres {
        conn: sqlx::PgConnection,
        key: String,
        check: Statement<Marker<'static>>,
    },
    #[cfg(feature = "mysql")]
    MySql {
        conn: sqlx::MySqlConnection,
        name: String,
        check: Statement<Marker<'static>>,
    },
    #[cfg(feature = "sqlite")]
    Sqlite { file: std::fs::File, path: PathBuf },
}

impl Session {
    /// What the acquisition records with a lease: the marker's key (PostgreSQL) or
    /// name (MariaDB); nothing on SQLite, where the marker file is found by owner.
    pub(crate) fn key(&self) -> &str {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres { key, .. } => key,
            #[cfg(feature = "mysql")]
            Self::MySql { name, .. } => name,
            #[cfg(feature = "sqlite")]
            Self::Sqlite { .. } => "",
        }
    }

    /// Whether this very session still holds its marker. An error means the session
    /// is gone.
    pub(crate) async fn holds(&mut self) -> Result<bool, sqlx::Error> {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres { conn, key, check } => {
                let rows = sqlx::Postgres::rows(On::Conn(conn), check, &Marker(key)).await?;
                Ok(match rows.first() {
                    Some(row) => sqlx::Postgres::int(row, 0)? > 0,
                    None => false,
                })
            }
            #[cfg(feature = "mysql")]
            Self::MySql { conn, name, check } => {
                let rows = sqlx::MySql::rows(On::Conn(conn), check, &Marker(name)).await?;
                Ok(match rows.first() {
                    Some(row) => sqlx::MySql::int(row, 0)? == 1,
                    None => false,
                })
            }
            // The lock lives with the open file, which lives with the handle.
            #[cfg(feature = "sqlite")]
            Self::Sqlite { .. } => Ok(true),
        }
    }

    /// Ends the session and frees the marker without blocking: the connection is
    /// closed politely on the current runtime, or just dropped (the server frees the
    /// marker when it sees the socket close); the marker file is removed and unlocked.
    pub(crate) fn close(self) {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres { conn, .. } => close_conn(conn),
            #[cfg(feature = "mysql")]
            Self::MySql { conn, .. } => close_conn(conn),
            #[cfg(feature = "sqlite")]
            Self::Sqlite { file, path } => {
                // Removed while locked: nobody can mistake it for a dead owner's
                // marker in between. Whatever fails here, the lock goes with the file.
                let _ = std::fs::remove_file(&path);
                drop(file);
            }
        }
    }
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
fn close_conn<C: sqlx::Connection + 'static>(conn: C) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            let _ = conn.close().await;
        });
    }
}

/// Why presence cannot work here, or `None` when it can as far as can be told without
/// asking the server (see [`Db::presence_on_server`]).
pub(crate) fn unavailable(db: &Db) -> Option<String> {
    match db {
        #[cfg(feature = "postgres")]
        Db::Postgres(b) => b.common().fence.is_pinned().then(|| {
            "a transaction-pooling proxy lends each transaction another server \
             connection, so no session can hold a marker: leave presence off with \
             transaction_pooling"
                .into()
        }),
        #[cfg(feature = "mysql")]
        Db::MySql(_) => None,
        #[cfg(feature = "sqlite")]
        Db::Sqlite(b) => b.markers().is_none().then(|| {
            "an in-memory SQLite database has no file beside which the marker could be \
             kept, and no other process to take a lease over from"
                .into()
        }),
    }
}

impl Db {
    /// How long the pool waits for a connection: the bound of presence's own waits.
    pub(crate) fn acquire_timeout(&self) -> std::time::Duration {
        match self {
            #[cfg(feature = "postgres")]
            Db::Postgres(b) => b.pool().options().get_acquire_timeout(),
            #[cfg(feature = "mysql")]
            Db::MySql(b) => b.pool().options().get_acquire_timeout(),
            #[cfg(feature = "sqlite")]
            Db::Sqlite(b) => b.pool().options().get_acquire_timeout(),
        }
    }

    /// Refuses presence where the server rules it out: a node of a Galera cluster,
    /// where a `GET_LOCK` name is held on one node only. Asked once per backend.
    pub(crate) async fn presence_on_server(&self) -> Result<(), Error> {
        if let Some(reason) = unavailable(self) {
            return Err(Error::PresenceUnavailable { reason });
        }
        #[cfg(feature = "mysql")]
        #[allow(irrefutable_let_patterns)]
        if let Db::MySql(b) = self {
            let nodes = b
                .galera_cluster_size()
                .await
                .map_err(|e| b.failure(e).error)?;
            if let Some(nodes) = nodes {
                return Err(Error::PresenceUnavailable {
                    reason: format!(
                        "the server is a node of a Galera cluster of {nodes} nodes, where a \
                         GET_LOCK name is held on one node only"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Opens a session of its own for `owner` and takes a marker in it; `count` tells
    /// this handle's sessions apart (a MariaDB name is used once). Bounded by the
    /// pool's acquire timeout.
    pub(crate) async fn open_presence(&self, owner: &str, count: u64) -> Result<Session, Error> {
        let _ = (owner, count);
        match self {
            #[cfg(feature = "postgres")]
            Db::Postgres(b) => {
                use sqlx::ConnectOptions as _;
                let limit = b.pool().options().get_acquire_timeout();
                let options = b.pool().connect_options();
                let mut conn = tokio::time::timeout(limit, options.connect())
                    .await
                    .map_err(timed_out)??;
                let target = target(b.table(), Mode::default(), super::Dialect::Postgres);
                let take: Statement<Marker<'static>> =
                    target.render(sql!("postgres", "presence_take"));
                for _ in 0..DRAWS {
                    let key = fastrand::i32(1..=i32::MAX).to_string();
                    let rows =
                        sqlx::Postgres::rows(On::Conn(&mut conn), &take, &Marker(&key)).await?;
                    let taken = match rows.first() {
                        Some(row) => sqlx::Postgres::flag(row, 0)?,
                        None => false,
                    };
                    if taken {
                        return Ok(Session::Postgres {
                            conn,
                            key,
                            check: target.render(sql!("postgres", "presence_check")),
                        });
                    }
                }
                Err(Error::PresenceUnavailable {
                    reason: format!("no free presence marker after {DRAWS} draws"),
                })
            }
            #[cfg(feature = "mysql")]
            Db::MySql(b) => {
                use sqlx::ConnectOptions as _;
                let limit = b.pool().options().get_acquire_timeout();
                let options = b.pool().connect_options();
                let mut conn = tokio::time::timeout(limit, options.connect())
                    .await
                    .map_err(timed_out)??;
                let target = target(b.table(), Mode::default(), super::Dialect::MySql);
                let take: Statement<Marker<'static>> =
                    target.render(sql!("mysql", "presence_take"));
                // At most 64 characters: 7 + 36 (a UUID) + 1 + 20.
                let name = format!("sqlock:{owner}:{count}");
                let rows = sqlx::MySql::rows(On::Conn(&mut conn), &take, &Marker(&name)).await?;
                let taken = match rows.first() {
                    Some(row) => sqlx::MySql::int(row, 0)? == 1,
                    None => false,
                };
                if !taken {
                    return Err(Error::PresenceUnavailable {
                        reason: format!("the presence marker {name:?} is held elsewhere"),
                    });
                }
                Ok(Session::MySql {
                    conn,
                    name,
                    check: target.render(sql!("mysql", "presence_check")),
                })
            }
            #[cfg(feature = "sqlite")]
            Db::Sqlite(b) => {
                let Some(dir) = b.markers() else {
                    return Err(Error::PresenceUnavailable {
                        reason: unavailable(self).unwrap_or_default(),
                    });
                };
                take_file(dir, owner)
            }
        }
    }
}

/// A presence connection that could not be opened within the pool's acquire timeout.
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn timed_out(_: tokio::time::error::Elapsed) -> Error {
    Error::Database(sqlx::Error::PoolTimedOut)
}

fn target(
    table: &crate::support::validate::TableName,
    mode: Mode,
    d: super::Dialect,
) -> Target<'_> {
    Target {
        table,
        placeholders: d.placeholders(),
        mode,
    }
}

/// The folder of presence marker files beside the SQLite database of `options`, or
/// `None` for an in-memory database.
#[cfg(feature = "sqlite")]
pub(crate) fn marker_dir(options: &sqlx::sqlite::SqliteConnectOptions) -> Option<PathBuf> {
    let file = options.get_filename();
    let name = file.to_string_lossy();
    // sqlx names an in-memory database `file:sqlx-in-memory-N`, and says so in its
    // options (not otherwise readable); `mode=memory` keeps the name it was given.
    let in_memory = format!("{options:?}").contains("in_memory: true");
    if in_memory || name.is_empty() || name == ":memory:" || name.starts_with("file:") {
        return None;
    }
    // Every process must find the same folder, whatever its working directory.
    let file = std::fs::canonicalize(file)
        .or_else(|_| std::env::current_dir().map(|d| d.join(file)))
        .ok()?;
    let mut dir = file.into_os_string();
    dir.push("-sqlock-presence");
    Some(PathBuf::from(dir))
}

/// Whether `owner` could be the name of a marker file: what the lock table says is
/// never trusted as a path.
#[cfg(feature = "sqlite")]
fn plain_owner(owner: &str) -> bool {
    !owner.is_empty()
        && owner.len() <= 64
        && owner.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// Creates and locks `owner`'s marker file in `dir`.
#[cfg(feature = "sqlite")]
fn take_file(dir: &Path, owner: &str) -> Result<Session, Error> {
    let failed = |e: std::io::Error| Error::PresenceUnavailable {
        reason: format!("the presence marker file in {} failed: {e}", dir.display()),
    };
    if !plain_owner(owner) {
        return Err(Error::PresenceUnavailable {
            reason: "the owner id cannot name a marker file".into(),
        });
    }
    std::fs::create_dir_all(dir).map_err(failed)?;
    let path = dir.join(owner);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(failed)?;
    match fs4::fs_std::FileExt::try_lock_exclusive(&file) {
        Ok(true) => Ok(Session::Sqlite { file, path }),
        Ok(false) => Err(Error::PresenceUnavailable {
            reason: format!("the presence marker {} is locked elsewhere", path.display()),
        }),
        Err(e) => Err(failed(e)),
    }
}

/// When `owner` had presence and its process is gone: its marker file, locked by the
/// caller until dropped, so that the owner's leases can be taken meanwhile. `None`
/// when the owner never had presence here (no file), or its marker is held.
#[cfg(feature = "sqlite")]
pub(crate) fn gone_owner(dir: &Path, owner: &str) -> Option<std::fs::File> {
    if !plain_owner(owner) {
        return None;
    }
    let file = std::fs::File::open(dir.join(owner)).ok()?;
    match fs4::fs_std::FileExt::try_lock_exclusive(&file) {
        Ok(true) => Some(file),
        _ => None,
    }
}
