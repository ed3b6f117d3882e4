//! Presence markers: what a handle holds, for as long as its process lives, to tell
//! the others that its leases are not orphaned (see `LockerBuilder::presence`).
//!
//! On PostgreSQL a marker is a session advisory lock, on MariaDB a `GET_LOCK` name.
//! A handle keeps two connections of its own for it (opened with the pool's connect
//! options, outside the pool, exempt from the server's idle and statement timeouts):
//! one holds the marker and idles, so that the server sees a dead process's socket
//! close at once and frees the marker; the other waits for the marker, so that the
//! moment the holder connection ends (killed, timed out, dropped by a proxy) the
//! server hands the marker to it in the same step, and the handle learns of it within
//! a round trip (`keepers/presence.rs` runs them). On SQLite a marker is a file lock
//! on a file named for the owner, in a folder beside the database file: the operating
//! system frees it when the process dies. An acquisition may take a live lease whose
//! owner's marker is free: inside its statement on the servers, through
//! `marker_file.rs` on SQLite.

#[cfg(feature = "sqlite")]
use super::marker_file::{take_file, MarkerFile};
use crate::support::error::Error;

#[cfg(any(feature = "postgres", feature = "mysql"))]
use super::backend::sql;
use super::backend::Backend;
#[cfg(any(feature = "postgres", feature = "mysql"))]
use super::runner::{On, Runner};
#[cfg(any(feature = "postgres", feature = "mysql"))]
use super::statement::{Mode, Statement, Target};
#[cfg(any(feature = "postgres", feature = "mysql"))]
use super::values::{Marker, MarkerWait, Nothing};
use super::Db;

/// How many random marker keys a PostgreSQL handle draws before it gives up: one is
/// taken by another session only by a chance of about one in two billion per session.
#[cfg(feature = "postgres")]
const DRAWS: u32 = 8;

#[cfg(feature = "postgres")]
const PG: super::Dialect = super::Dialect::Postgres;
#[cfg(feature = "mysql")]
const MY: super::Dialect = super::Dialect::MySql;

/// A connection of a handle's presence, exempt from the server's timeouts.
#[derive(Debug)]
pub(crate) enum Conn {
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgConnection),
    #[cfg(feature = "mysql")]
    MySql {
        conn: sqlx::MySqlConnection,
        /// The `server_id` of the server it reached, which the marker's name carries.
        server: i64,
    },
}

impl Conn {
    /// Ends the connection without blocking: closed politely on the current runtime,
    /// or just dropped (the server frees what it held when it sees the socket close).
    pub(crate) fn close(self) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(self.close_now());
        }
    }

    /// Ends the connection politely, whatever its state.
    pub(crate) async fn close_now(self) {
        use sqlx::Connection as _;
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(conn) => {
                let _ = conn.close().await;
            }
            #[cfg(feature = "mysql")]
            Self::MySql { conn, .. } => {
                let _ = conn.close().await;
            }
        }
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

    /// Whether markers are held by server connections (PostgreSQL, MariaDB), rather
    /// than by a file (SQLite).
    pub(crate) fn presence_on_connections(&self) -> bool {
        match self {
            #[cfg(feature = "sqlite")]
            Db::Sqlite(_) => false,
            #[allow(unreachable_patterns)]
            _ => true,
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

    /// Opens a connection for presence, outside the pool, with the pool's connect
    /// options, and exempts it from the server's timeouts (`presence_session.sql`):
    /// a server that refuses that refuses presence. Bounded by the pool's acquire
    /// timeout.
    pub(crate) async fn presence_connect(&self) -> Result<Conn, Error> {
        self.connect_apart(false).await
    }

    /// [`presence_connect`](Self::presence_connect), for a connection that waits in the
    /// server or keeps wake locks: its set-up statements are counted as wake-lock
    /// statements (`sqlock_wake_lock_statements_total`), not as the lock table's.
    pub(crate) async fn wake_connect(&self) -> Result<Conn, Error> {
        self.connect_apart(true).await
    }

    /// A connection outside the pool, exempt from the server's timeouts; its set-up
    /// statements counted as wake-lock statements when `wake`.
    async fn connect_apart(&self, wake: bool) -> Result<Conn, Error> {
        let _ = wake;
        let limit = self.acquire_timeout();
        match self {
            #[cfg(feature = "postgres")]
            Db::Postgres(b) => {
                use sqlx::ConnectOptions as _;
                let opening = async {
                    let mut conn = b.pool().connect_options().connect().await?;
                    let exempt: Statement<Nothing> = counted(
                        target(b.table(), PG, sql!("postgres", "presence_session")),
                        wake,
                    );
                    sqlx::Postgres::rows(On::Conn(&mut conn), &exempt, &Nothing).await?;
                    Ok::<_, sqlx::Error>(Conn::Postgres(conn))
                };
                tokio::time::timeout(limit, opening)
                    .await
                    .map_err(timed_out)?
                    .map_err(|e| b.failure(e).error)
            }
            #[cfg(feature = "mysql")]
            Db::MySql(b) => {
                use sqlx::ConnectOptions as _;
                let opening = async {
                    let mut conn = b.pool().connect_options().connect().await?;
                    let exempt: Statement<Nothing> = counted(
                        target(b.table(), MY, sql!("mysql", "presence_session")),
                        wake,
                    );
                    sqlx::MySql::execute(On::Conn(&mut conn), &exempt, &Nothing).await?;
                    let ask: Statement<Nothing> = counted(
                        target(b.table(), MY, sql!("mysql", "presence_server")),
                        wake,
                    );
                    let rows = sqlx::MySql::rows(On::Conn(&mut conn), &ask, &Nothing).await?;
                    let server = match rows.first() {
                        Some(row) => sqlx::MySql::int(row, 0)?,
                        None => 0,
                    };
                    Ok::<_, sqlx::Error>(Conn::MySql { conn, server })
                };
                tokio::time::timeout(limit, opening)
                    .await
                    .map_err(timed_out)?
                    .map_err(|e| b.failure(e).error)
            }
            #[cfg(feature = "sqlite")]
            Db::Sqlite(_) => Err(Error::PresenceUnavailable {
                reason: "SQLite keeps presence markers in files, not on connections".into(),
            }),
        }
    }

    /// Takes a new marker for `owner` on `conn`, without waiting: its text, which the
    /// acquisitions record (PostgreSQL: the key, a random number; MariaDB: the name,
    /// `sqlock:<server_id>:<owner>`). Bounded by the pool's acquire timeout.
    pub(crate) async fn presence_take(
        &self,
        conn: &mut Conn,
        owner: &str,
    ) -> Result<String, Error> {
        let _ = owner;
        let limit = self.acquire_timeout();
        match (self, conn) {
            #[cfg(feature = "postgres")]
            (Db::Postgres(b), Conn::Postgres(conn)) => {
                let take: Statement<Marker<'static>> =
                    target(b.table(), PG, sql!("postgres", "presence_take"));
                let taking = async {
                    for _ in 0..DRAWS {
                        let key = fastrand::i32(1..=i32::MAX).to_string();
                        let rows = sqlx::Postgres::rows(On::Conn(&mut *conn), &take, &Marker(&key))
                            .await?;
                        if let Some(row) = rows.first() {
                            if sqlx::Postgres::flag(row, 0)? {
                                return Ok(Some(key));
                            }
                        }
                    }
                    Ok::<_, sqlx::Error>(None)
                };
                let taken = tokio::time::timeout(limit, taking)
                    .await
                    .map_err(timed_out)?
                    .map_err(|e| b.failure(e).error)?;
                taken.ok_or_else(|| Error::PresenceUnavailable {
                    reason: format!("no free presence marker after {DRAWS} draws"),
                })
            }
            #[cfg(feature = "mysql")]
            (Db::MySql(b), Conn::MySql { conn, server }) => {
                let name = marker_name(*server, owner);
                let take: Statement<Marker<'static>> =
                    target(b.table(), MY, sql!("mysql", "presence_take"));
                let marker = Marker(&name);
                let taking = sqlx::MySql::rows(On::Conn(conn), &take, &marker);
                let rows = tokio::time::timeout(limit, taking)
                    .await
                    .map_err(timed_out)?
                    .map_err(|e| b.failure(e).error)?;
                let taken = match rows.first() {
                    Some(row) => sqlx::MySql::int(row, 0).map_err(|e| b.failure(e).error)? == 1,
                    None => false,
                };
                if !taken {
                    return Err(Error::PresenceUnavailable {
                        reason: format!("the presence marker {name:?} is held elsewhere"),
                    });
                }
                Ok(name)
            }
            #[allow(unreachable_patterns)]
            _ => Err(Error::PresenceUnavailable {
                reason: "a presence connection of another server".into(),
            }),
        }
    }

    /// The marker a standby on `conn` waits for: the handle's `current` one, or on
    /// MariaDB the name of `owner` for the server `conn` reached, when that is another
    /// server than `current` names (a failover): a marker is trusted only on the
    /// server that recorded it, so there the handle takes a marker of its own anew.
    pub(crate) fn presence_marker(conn: &Conn, owner: &str, current: &str) -> String {
        let _ = (owner, current);
        match *conn {
            #[cfg(feature = "postgres")]
            Conn::Postgres(_) => current.to_owned(),
            #[cfg(feature = "mysql")]
            Conn::MySql { server, .. } => marker_name(server, owner),
        }
    }

    /// Waits on `conn`, for as long as it takes, until it holds `marker`
    /// (`presence_wait.sql`): `Ok(true)` once it does, the marker's holder connection
    /// having ended; `Ok(false)` when the wait ended without it (interrupted by `KILL
    /// QUERY`, or a year passed): send it again. An error: the wait was cancelled
    /// (`pg_cancel_backend`), or the connection ended. Cancel-safe: dropped, the wait
    /// leaves the connection in an unknown state, to be closed.
    pub(crate) async fn presence_wait(
        &self,
        conn: &mut Conn,
        marker: &str,
    ) -> Result<bool, sqlx::Error> {
        match (self, conn) {
            #[cfg(feature = "postgres")]
            (Db::Postgres(b), Conn::Postgres(conn)) => {
                let wait: Statement<Marker<'static>> =
                    target(b.table(), PG, sql!("postgres", "presence_wait"));
                let rows = sqlx::Postgres::rows(On::Conn(conn), &wait, &Marker(marker)).await?;
                Ok(!rows.is_empty())
            }
            #[cfg(feature = "mysql")]
            (Db::MySql(b), Conn::MySql { conn, .. }) => {
                let wait: Statement<Marker<'static>> =
                    target(b.table(), MY, sql!("mysql", "presence_wait"));
                let rows = sqlx::MySql::rows(On::Conn(conn), &wait, &Marker(marker)).await?;
                got_lock(&rows)
            }
            #[allow(unreachable_patterns)]
            _ => Err(sqlx::Error::Protocol(
                "a presence connection of another server".into(),
            )),
        }
    }

    /// Waits on `conn`, for `wait` at most, until another handle's presence `marker`
    /// is freed, and lets it go at once (`marker_wait.sql`): `Ok(true)` when it was
    /// freed (the holder's sessions are gone), `Ok(false)` when the wait ran out. An
    /// error: the connection failed, or ended. Cancel-safe as
    /// [`presence_wait`](Self::presence_wait): a dropped wait leaves the connection in
    /// an unknown state, to be closed.
    pub(crate) async fn marker_wait(
        &self,
        conn: &mut Conn,
        marker: &str,
        wait: std::time::Duration,
    ) -> Result<bool, sqlx::Error> {
        #[cfg(any(feature = "postgres", feature = "mysql"))]
        let values = MarkerWait {
            presence: marker,
            wait_us: i64::try_from(wait.as_micros()).unwrap_or(i64::MAX),
        };
        #[cfg(not(any(feature = "postgres", feature = "mysql")))]
        let _ = (marker, wait);
        match (self, conn) {
            #[cfg(feature = "postgres")]
            (Db::Postgres(b), Conn::Postgres(conn)) => {
                let wait: Statement<MarkerWait<'static>> =
                    target(b.table(), PG, sql!("postgres", "marker_wait"));
                match sqlx::Postgres::rows(On::Conn(conn), &wait, &values).await {
                    Ok(rows) => Ok(!rows.is_empty()),
                    // lock_timeout: the marker is still held.
                    Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("55P03") => {
                        Ok(false)
                    }
                    Err(e) => Err(e),
                }
            }
            #[cfg(feature = "mysql")]
            (Db::MySql(b), Conn::MySql { conn, .. }) => {
                let wait: Statement<MarkerWait<'static>> =
                    target(b.table(), MY, sql!("mysql", "marker_wait"));
                let rows = sqlx::MySql::rows(On::Conn(conn), &wait, &values).await?;
                got_lock(&rows)
            }
            #[allow(unreachable_patterns)]
            _ => Err(sqlx::Error::Protocol(
                "a presence connection of another server".into(),
            )),
        }
    }

    /// Creates and locks `owner`'s marker file beside the SQLite database.
    #[cfg(feature = "sqlite")]
    pub(crate) fn presence_file(&self, owner: &str) -> Result<MarkerFile, Error> {
        let dir = match self {
            Db::Sqlite(b) => b.markers(),
            #[allow(unreachable_patterns)]
            _ => None,
        };
        let Some(dir) = dir else {
            return Err(Error::PresenceUnavailable {
                reason: unavailable(self).unwrap_or_default(),
            });
        };
        take_file(dir, owner)
    }
}

/// A MariaDB wait's answer on a named lock (`presence_wait.sql`, `marker_wait.sql`):
/// whether `GET_LOCK` answered 1, the name taken (and, for a marker, let go).
#[cfg(feature = "mysql")]
pub(super) fn got_lock(rows: &[sqlx::mysql::MySqlRow]) -> Result<bool, sqlx::Error> {
    Ok(match rows.first() {
        Some(row) => sqlx::MySql::int(row, 0)? == 1,
        None => false,
    })
}

/// The name of `owner`'s marker on the MariaDB server `server`: at most 7 + 20 + 1 +
/// 32 characters, within GET_LOCK's 64.
#[cfg(feature = "mysql")]
fn marker_name(server: i64, owner: &str) -> String {
    let owner: String = owner.chars().filter(|c| *c != '-').collect();
    format!("sqlock:{server}:{owner}")
}

/// A presence connection that could not be opened, or answer, within the pool's
/// acquire timeout.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(super) fn timed_out(_: tokio::time::error::Elapsed) -> Error {
    Error::Database(sqlx::Error::PoolTimedOut)
}

/// `s`, counted as a wake lock's statement when `wake`.
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn counted<V: super::statement::Values>(s: Statement<V>, wake: bool) -> Statement<V> {
    if wake {
        s.counted_as_wake_lock()
    } else {
        s
    }
}

/// `template` rendered for the handle's table in `dialect`.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(super) fn target<V: super::statement::Values>(
    table: &crate::support::validate::TableName,
    dialect: super::Dialect,
    template: &str,
) -> Statement<V> {
    Target {
        table,
        placeholders: dialect.placeholders(),
        mode: Mode::default(),
    }
    .render(template)
}
