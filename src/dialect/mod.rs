//! The thin layer between the strategies and the three database servers.
//!
//! A dialect supplies its statements (from `sql/<dialect>/`), runs them on its own
//! sqlx pool type, reads the results back into the shapes the strategies use, and
//! classifies its errors. Everything else (validation, waiting, guards) is written
//! once, above this layer.

#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;

#[cfg(feature = "mysql")]
pub(crate) use mysql::for_update as mysql_for_update;
#[cfg(feature = "postgres")]
pub(crate) use postgres::for_update as pg_for_update;
#[cfg(feature = "sqlite")]
mod sqlite;

use crate::error::{Class, Error, Result};
use crate::sql::{Args, Placeholders, Statement};
use crate::validate::TableName;
use crate::Strategy;

/// A database server family, with its SQL dialect.
///
/// Always available, whatever the crate features, so that tools can print the DDL of
/// any dialect; running statements needs the matching feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// PostgreSQL 12 or later.
    Postgres,
    /// MariaDB 10.5 or later (the `mysql` feature). MySQL itself lacks the `RETURNING`
    /// and sequences sqlock relies on.
    MySql,
    /// SQLite 3.35 or later (the version sqlx bundles qualifies).
    Sqlite,
}

impl Dialect {
    /// The dialect's folder name under `sql/` and `migrations/`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::MySql => "mysql",
            Self::Sqlite => "sqlite",
        }
    }

    fn placeholders(self) -> Placeholders {
        match self {
            Self::Postgres => Placeholders::Numbered,
            Self::MySql | Self::Sqlite => Placeholders::Positional,
        }
    }

    /// The dialect for a database URL's scheme (`postgres://`, `postgresql://`,
    /// `mysql://`, `mariadb://`, `sqlite:`), if it is one sqlock knows.
    ///
    /// ```
    /// use sqlock::Dialect;
    ///
    /// assert_eq!(Dialect::from_url("postgres://localhost/app"), Some(Dialect::Postgres));
    /// assert_eq!(Dialect::from_url("sqlite:locks.db"), Some(Dialect::Sqlite));
    /// assert_eq!(Dialect::from_url("redis://localhost"), None);
    /// ```
    pub fn from_url(url: &str) -> Option<Self> {
        let scheme = url.split(':').next()?.to_ascii_lowercase();
        match scheme.as_str() {
            "postgres" | "postgresql" => Some(Self::Postgres),
            "mysql" | "mariadb" => Some(Self::MySql),
            "sqlite" => Some(Self::Sqlite),
            _ => None,
        }
    }
}

impl std::fmt::Display for Dialect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A sqlx connection pool of one of the supported databases.
///
/// Built with `From` from a `PgPool`, `MySqlPool` or `SqlitePool`, so
/// [`Locker::builder`](crate::Locker::builder) takes any of them directly. Cloning is
/// cheap: it clones the pool handle.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum DbPool {
    /// A PostgreSQL pool.
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgPool),
    /// A MariaDB pool.
    #[cfg(feature = "mysql")]
    MySql(sqlx::MySqlPool),
    /// A SQLite pool.
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::SqlitePool),
}

#[cfg(feature = "postgres")]
impl From<sqlx::PgPool> for DbPool {
    fn from(pool: sqlx::PgPool) -> Self {
        Self::Postgres(pool)
    }
}

#[cfg(feature = "mysql")]
impl From<sqlx::MySqlPool> for DbPool {
    fn from(pool: sqlx::MySqlPool) -> Self {
        Self::MySql(pool)
    }
}

#[cfg(feature = "sqlite")]
impl From<sqlx::SqlitePool> for DbPool {
    fn from(pool: sqlx::SqlitePool) -> Self {
        Self::Sqlite(pool)
    }
}

/// Runs `$body` with `$pool` bound to the concrete pool and `$dialect` to its module.
macro_rules! dispatch {
    ($db:expr, |$pool:ident, $m:ident| $body:expr) => {
        match $db {
            #[cfg(feature = "postgres")]
            DbPool::Postgres($pool) => {
                #[allow(unused_imports)]
                use self::postgres as $m;
                $body
            }
            #[cfg(feature = "mysql")]
            DbPool::MySql($pool) => {
                #[allow(unused_imports)]
                use self::mysql as $m;
                $body
            }
            #[cfg(feature = "sqlite")]
            DbPool::Sqlite($pool) => {
                #[allow(unused_imports)]
                use self::sqlite as $m;
                $body
            }
        }
    };
}

/// Runs `$run` (a query on the executor `$ex`) on `$pool`. A pinned statement runs in
/// a transaction of its own: behind a transaction-pooling proxy such as PgBouncer, only
/// an open transaction keeps sqlx's separate parse and execute round trips on one
/// server connection.
macro_rules! on_pool {
    ($pool:expr, $s:expr, |$ex:ident| $run:expr) => {
        on_pool!($pool, in_transaction: $s.is_pinned(), |$ex| $run)
    };
    ($pool:expr, in_transaction: $tx:expr, |$ex:ident| $run:expr) => {{
        if $tx {
            let mut tx = $pool.begin().await?;
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
            let $ex = $pool;
            $run.await
        }
    }};
}

impl DbPool {
    /// The pool's dialect.
    pub fn dialect(&self) -> Dialect {
        dispatch!(self, |_pool, m| m::DIALECT)
    }

    /// Whether every connection the pool may open is open and in use.
    pub(crate) fn is_exhausted(&self) -> bool {
        dispatch!(self, |pool, _m| pool.num_idle() == 0
            && pool.size() >= pool.options().get_max_connections())
    }

    /// Whether the pool was closed.
    pub fn is_closed(&self) -> bool {
        dispatch!(self, |pool, _m| pool.is_closed())
    }

    /// Closes the pool: see sqlx's `Pool::close`.
    pub async fn close(&self) {
        dispatch!(self, |pool, _m| pool.close().await)
    }

    /// Runs a script of several statements (DDL) in one go.
    pub(crate) async fn execute_script(&self, script: String) -> Result<(), sqlx::Error> {
        let script = sqlx::AssertSqlSafe(script);
        dispatch!(self, |pool, _m| sqlx::raw_sql(script)
            .execute(pool)
            .await
            .map(drop))
    }

    /// Applies sqlock's migrations, recorded in their own history table.
    pub(crate) async fn migrate(&self, migrator: &sqlx::migrate::Migrator) -> Result<()> {
        dispatch!(self, |pool, _m| migrator.run(pool).await?);
        Ok(())
    }

    /// Runs the acquisition statement. On a node of a Galera cluster it runs in an
    /// explicit transaction (see [`galera_cluster_size`](Self::galera_cluster_size)).
    pub(crate) async fn lease_acquire(
        &self,
        s: &Statements,
        a: &Args,
        galera: &GaleraCheck,
    ) -> Result<Option<Grant>, Failure> {
        // Galera certifies an autocommit statement at its COMMIT, after MariaDB has sent
        // the RETURNING row; sqlx cannot read an error that follows rows. In an explicit
        // transaction the certification failure is the COMMIT's own error instead.
        let in_tx =
            s.lease_acquire.is_pinned() || self.galera_cluster_size(s, galera).await?.is_some();
        let grant = dispatch!(self, |pool, m| fetch_grant(
            pool,
            &s.lease_acquire,
            a,
            in_tx
        )
        .await
        .map_err(|e| s.error(m::classify(&e), e))?);
        Ok(grant.filter(|g| g.owner == a.owner))
    }

    /// The size of the Galera cluster the server is a node of, when it is one of
    /// several; `None` for a server on its own and for other dialects. Asked once per
    /// handle (the answer is kept in `galera`).
    pub(crate) async fn galera_cluster_size(
        &self,
        s: &Statements,
        galera: &GaleraCheck,
    ) -> Result<Option<i64>, Failure> {
        match self {
            #[cfg(feature = "mysql")]
            Self::MySql(pool) => galera
                .get_or_try_init(|| mysql::galera_cluster_size(pool, s))
                .await
                .copied(),
            #[allow(unreachable_patterns)]
            _ => {
                let _ = (s, galera);
                Ok(None)
            }
        }
    }

    /// Gives back one hold. The insert strategy deletes the row with its last hold;
    /// the lease keeps it, free.
    pub(crate) async fn release(&self, s: &Statements, a: &Args) -> Result<bool, Failure> {
        if a.strategy == Strategy::Insert && self.matched(s, &s.insert_release, a).await? {
            return Ok(true);
        }
        self.matched(s, &s.lease_release, a).await
    }

    /// Runs `st` and tells whether it matched a row.
    async fn matched(&self, s: &Statements, st: &Statement, a: &Args) -> Result<bool, Failure> {
        dispatch!(self, |pool, m| execute(pool, st, a)
            .await
            .map(|done| done.rows_affected() > 0)
            .map_err(|e| s.error(m::classify(&e), e)))
    }

    /// Renews the `n` leases of `a.batch` in one statement (two on MariaDB when some
    /// were lost).
    pub(crate) async fn lease_renew(
        &self,
        s: &Statements,
        a: &Args,
        n: usize,
    ) -> Result<Renewal, Failure> {
        dispatch!(self, |pool, m| m::lease_renew(pool, s, a, n)
            .await
            .map_err(|e| s.error(m::classify(&e), e)))
    }

    pub(crate) async fn lease_force_release(
        &self,
        s: &Statements,
        a: &Args,
    ) -> Result<bool, Failure> {
        self.matched(s, &s.lease_force_release, a).await
    }

    pub(crate) async fn list(&self, s: &Statements, a: &Args) -> Result<Vec<Listed>, Failure> {
        dispatch!(self, |pool, m| fetch_listed(pool, &s.list, a)
            .await
            .map_err(|e| s.error(m::classify(&e), e)))
    }

    pub(crate) async fn sweep(&self, s: &Statements, a: &Args) -> Result<u64, Failure> {
        dispatch!(self, |pool, m| execute(pool, &s.sweep, a)
            .await
            .map(|done| done.rows_affected())
            .map_err(|e| s.error(m::classify(&e), e)))
    }

    pub(crate) async fn lease_extend(
        &self,
        s: &Statements,
        a: &Args,
    ) -> Result<Option<i64>, Failure> {
        dispatch!(self, |pool, m| m::lease_extend(pool, &s.lease_extend, a)
            .await
            .map_err(|e| s.error(m::classify(&e), e)))
    }
}

/// The outcome of a handle's check for a Galera cluster: the cluster's size, or `None`
/// for a server on its own. Made once, before the handle's first acquisition.
pub(crate) type GaleraCheck = tokio::sync::OnceCell<Option<i64>>;

/// Runs an acquisition statement whose `RETURNING` gives owner, token, expiry and
/// holds, in an explicit transaction when `in_tx`.
pub(crate) async fn fetch_grant<DB>(
    pool: &sqlx::Pool<DB>,
    s: &Statement,
    a: &Args,
    in_tx: bool,
) -> Result<Option<Grant>, sqlx::Error>
where
    DB: sqlx::Database + sqlx::database::HasStatementCache,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'a> &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> i64: sqlx::Encode<'a, DB> + sqlx::Decode<'a, DB> + sqlx::Type<DB>,
    for<'a> i32: sqlx::Decode<'a, DB> + sqlx::Type<DB>,
    for<'a> String: sqlx::Decode<'a, DB> + sqlx::Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    use sqlx::Row;
    // Read to the end of the response, not just to the first row: an autocommit
    // statement's COMMIT may still fail after its RETURNING rows were sent (a Galera
    // certification failure, a serialization failure under SERIALIZABLE), and a grant
    // whose commit failed is no grant.
    let rows = on_pool!(pool, in_transaction: in_tx, |ex| s.bind::<DB>(a).fetch_all(ex))?;
    rows.into_iter()
        .next()
        .map(|r| {
            Ok(Grant {
                owner: r.try_get(0)?,
                token: r.try_get(1)?,
                expires_us: r.try_get(2)?,
                hold_count: r.try_get(3)?,
            })
        })
        .transpose()
}

/// Runs a statement for its effect.
pub(crate) async fn execute<DB>(
    pool: &sqlx::Pool<DB>,
    s: &Statement,
    a: &Args,
) -> Result<DB::QueryResult, sqlx::Error>
where
    DB: sqlx::Database + sqlx::database::HasStatementCache,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'a> &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> i64: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    on_pool!(pool, s, |ex| s.bind::<DB>(a).execute(ex))
}

/// One held lock as `list.sql` reports it.
#[derive(Debug, Clone)]
pub(crate) struct Listed {
    pub(crate) key: String,
    pub(crate) strategy: String,
    pub(crate) owner: String,
    pub(crate) token: i64,
    pub(crate) hold_count: i32,
    pub(crate) acquired_us: i64,
    pub(crate) expires_us: i64,
    pub(crate) now_us: i64,
}

/// Runs `list.sql`.
pub(crate) async fn fetch_listed<DB>(
    pool: &sqlx::Pool<DB>,
    s: &Statement,
    a: &Args,
) -> Result<Vec<Listed>, sqlx::Error>
where
    DB: sqlx::Database + sqlx::database::HasStatementCache,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'a> &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> i64: sqlx::Encode<'a, DB> + sqlx::Decode<'a, DB> + sqlx::Type<DB>,
    for<'a> i32: sqlx::Decode<'a, DB> + sqlx::Type<DB>,
    for<'a> String: sqlx::Decode<'a, DB> + sqlx::Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    use sqlx::Row;
    let rows = on_pool!(pool, s, |ex| s.bind::<DB>(a).fetch_all(ex))?;
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
}

/// Takes the for-update row lock of `a.key` on `conn`, inside its open transaction,
/// bounding the wait where the dialect needs a setting for it (always, so that no
/// wait of the transaction is unbounded). `false` when the key has no row.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) async fn lock_row<DB>(
    conn: &mut DB::Connection,
    f: &ForUpdateStatements,
    a: &Args,
    nowait: bool,
) -> Result<bool, sqlx::Error>
where
    DB: sqlx::Database + sqlx::database::HasStatementCache,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'a> &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> i64: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    if let Some(timeout) = &f.timeout {
        timeout.bind::<DB>(a).execute(&mut *conn).await?;
    }
    let lock = if nowait { &f.lock_nowait } else { &f.lock };
    let row = lock.bind::<DB>(a).fetch_optional(&mut *conn).await?;
    Ok(row.is_some())
}

/// Opens a transaction on `pool` and takes the for-update row lock of `a.key` in it.
/// A key without a row gets one first, created free in a statement of its own outside
/// the transaction (so the transaction never waits on, or holds, a fresh insert), and
/// then a new transaction locks it.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) async fn lock_in_transaction<DB>(
    pool: &sqlx::Pool<DB>,
    f: &ForUpdateStatements,
    a: &Args,
    nowait: bool,
) -> Result<Option<sqlx::Transaction<'static, DB>>, sqlx::Error>
where
    DB: sqlx::Database + sqlx::database::HasStatementCache,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'a> &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> i64: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    let mut tx = pool.begin().await?;
    if lock_row::<DB>(&mut tx, f, a, nowait).await? {
        return Ok(Some(tx));
    }
    tx.rollback().await?;
    execute(pool, &f.ensure, a).await?;
    let mut tx = pool.begin().await?;
    if lock_row::<DB>(&mut tx, f, a, nowait).await? {
        return Ok(Some(tx));
    }
    Ok(None)
}

/// Runs a statement and reads the first column of every row it returns.
pub(crate) async fn fetch_column<DB, T>(
    pool: &sqlx::Pool<DB>,
    s: &Statement,
    a: &Args,
) -> Result<Vec<T>, sqlx::Error>
where
    DB: sqlx::Database + sqlx::database::HasStatementCache,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'a> &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> i64: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> T: sqlx::Decode<'a, DB> + sqlx::Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    use sqlx::Row;
    let rows = on_pool!(pool, s, |ex| s.bind::<DB>(a).fetch_all(ex))?;
    rows.iter().map(|r| r.try_get(0)).collect()
}

/// What a batched renewal found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Renewal {
    /// The keys still held, or `None` when every key of the batch was.
    pub(crate) survivors: Option<Vec<String>>,
    /// How many statements it took (one, or two on MariaDB after a loss).
    pub(crate) statements: u32,
}

/// What an acquisition statement reports: the row as it stands after the statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) owner: String,
    pub(crate) token: i64,
    pub(crate) expires_us: i64,
    pub(crate) hold_count: i32,
}

/// A failed statement: its class decides whether the caller may retry.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) class: Class,
    pub(crate) error: Error,
}

impl From<Failure> for Error {
    fn from(f: Failure) -> Self {
        f.error
    }
}

/// Every statement of one dialect, rendered for one table.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    dialect: Dialect,
    table: TableName,
    lease_acquire: Statement,
    lease_release: Statement,
    lease_extend: Statement,
    lease_renew: Statement,
    /// MariaDB only: which leases of a batch survived, after a short renewal count.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    lease_survivors: Option<Statement>,
    lease_force_release: Statement,
    insert_release: Statement,
    sweep: Statement,
    list: Statement,
    pub(crate) fence: Statement,
    /// The for-update strategy's statements; `None` where it is not supported.
    pub(crate) for_update: Option<ForUpdateStatements>,
    /// MariaDB only: the size of the Galera cluster the server belongs to, if any.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) galera_check: Option<Statement>,
}

/// The statements of the for-update strategy.
#[derive(Debug, Clone)]
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) struct ForUpdateStatements {
    /// PostgreSQL only: the transaction's lock_timeout. MariaDB waits in the statement.
    pub(crate) timeout: Option<Statement>,
    pub(crate) lock: Statement,
    pub(crate) lock_nowait: Statement,
    pub(crate) ensure: Statement,
    pub(crate) grant: Statement,
    pub(crate) keepalive: Statement,
}

/// How a handle's statements are sent, beyond their dialect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Mode {
    /// Releases also announce the freed key on the table's channel (PostgreSQL).
    pub(crate) notify: bool,
    /// Statements are unnamed and pinned by a transaction each (transaction pooling).
    pub(crate) pinned: bool,
}

impl Statements {
    pub(crate) fn new(dialect: Dialect, table: &TableName, mode: Mode) -> Self {
        let t = templates(dialect);
        let render =
            |text| Statement::render(text, table, dialect.placeholders()).pinned(mode.pinned);
        // With notifications on, the releases that free a key are the variants that
        // announce it; the dialects without them never get here (refused by build()).
        let notify = t.notify.as_ref().filter(|_| mode.notify);
        let (lease_release, insert_release, lease_force_release) = match notify {
            Some(n) => (n.lease_release, n.insert_release, n.lease_force_release),
            None => (t.lease_release, t.insert_release, t.lease_force_release),
        };
        Self {
            dialect,
            table: table.clone(),
            lease_acquire: render(t.lease_acquire),
            lease_release: render(lease_release),
            lease_extend: render(t.lease_extend),
            lease_renew: render(t.lease_renew),
            lease_survivors: t.lease_survivors.map(render),
            lease_force_release: render(lease_force_release),
            insert_release: render(insert_release),
            sweep: render(t.sweep),
            list: render(t.list),
            fence: render(t.fence),
            for_update: t.for_update.map(|f| ForUpdateStatements {
                timeout: f.timeout.map(render),
                lock: render(f.lock),
                lock_nowait: render(f.lock_nowait),
                ensure: render(f.ensure),
                grant: render(f.grant),
                keepalive: render(f.keepalive),
            }),
            galera_check: t.galera_check.map(render),
        }
    }

    pub(crate) fn table(&self) -> &TableName {
        &self.table
    }

    /// The crate error for a failed statement of this dialect.
    fn error(&self, class: Class, source: sqlx::Error) -> Failure {
        // Every strategy draws its connections from the application's pool.
        if matches!(source, sqlx::Error::PoolTimedOut) {
            return Failure {
                class: Class::Other,
                error: Error::PoolExhausted,
            };
        }
        let error = match class {
            Class::MissingTable => Error::MissingTable {
                table: self.table.to_string(),
                dialect: self.dialect.name(),
                source,
            },
            Class::Unsupported => Error::Unsupported(format!(
                "the server rejected sqlock's SQL ({source}); the mysql feature needs \
                 MariaDB 10.5 or later"
            )),
            Class::Contention | Class::Other => Error::Database(source),
        };
        Failure { class, error }
    }
}

/// The statement templates of one dialect, as written in `sql/<dialect>/`.
struct Templates {
    lease_acquire: &'static str,
    lease_release: &'static str,
    lease_extend: &'static str,
    lease_renew: &'static str,
    lease_survivors: Option<&'static str>,
    lease_force_release: &'static str,
    insert_release: &'static str,
    sweep: &'static str,
    list: &'static str,
    fence: &'static str,
    for_update: Option<ForUpdateTemplates>,
    notify: Option<NotifyTemplates>,
    galera_check: Option<&'static str>,
}

/// The releases that also announce the freed key (PostgreSQL only).
struct NotifyTemplates {
    lease_release: &'static str,
    insert_release: &'static str,
    lease_force_release: &'static str,
}

struct ForUpdateTemplates {
    timeout: Option<&'static str>,
    lock: &'static str,
    lock_nowait: &'static str,
    ensure: &'static str,
    grant: &'static str,
    keepalive: &'static str,
}

macro_rules! for_update_of {
    ($dir:literal, $timeout:expr) => {
        Some(ForUpdateTemplates {
            timeout: $timeout,
            lock: include_str!(concat!("../../sql/", $dir, "/for_update_lock.sql")),
            lock_nowait: include_str!(concat!("../../sql/", $dir, "/for_update_lock_nowait.sql")),
            ensure: include_str!(concat!("../../sql/", $dir, "/for_update_ensure.sql")),
            grant: include_str!(concat!("../../sql/", $dir, "/for_update_grant.sql")),
            keepalive: include_str!(concat!("../../sql/", $dir, "/for_update_keepalive.sql")),
        })
    };
}

macro_rules! templates_of {
    ($dir:literal, $survivors:expr, $for_update:expr, $notify:expr, $galera:expr) => {
        Templates {
            lease_acquire: include_str!(concat!("../../sql/", $dir, "/lease_acquire.sql")),
            lease_release: include_str!(concat!("../../sql/", $dir, "/lease_release.sql")),
            lease_extend: include_str!(concat!("../../sql/", $dir, "/lease_extend.sql")),
            lease_renew: include_str!(concat!("../../sql/", $dir, "/lease_renew.sql")),
            lease_survivors: $survivors,
            lease_force_release: include_str!(concat!(
                "../../sql/",
                $dir,
                "/lease_force_release.sql"
            )),
            insert_release: include_str!(concat!("../../sql/", $dir, "/insert_release.sql")),
            sweep: include_str!(concat!("../../sql/", $dir, "/sweep.sql")),
            list: include_str!(concat!("../../sql/", $dir, "/list.sql")),
            fence: include_str!(concat!("../../sql/", $dir, "/fence.sql")),
            for_update: $for_update,
            notify: $notify,
            galera_check: $galera,
        }
    };
}

fn templates(dialect: Dialect) -> Templates {
    match dialect {
        Dialect::Postgres => templates_of!(
            "postgres",
            None,
            for_update_of!(
                "postgres",
                Some(include_str!("../../sql/postgres/for_update_timeout.sql"))
            ),
            Some(NotifyTemplates {
                lease_release: include_str!("../../sql/postgres/lease_release_notify.sql"),
                insert_release: include_str!("../../sql/postgres/insert_release_notify.sql"),
                lease_force_release: include_str!(
                    "../../sql/postgres/lease_force_release_notify.sql"
                ),
            }),
            None
        ),
        Dialect::MySql => templates_of!(
            "mysql",
            Some(include_str!("../../sql/mysql/lease_survivors.sql")),
            for_update_of!("mysql", None),
            None,
            Some(include_str!("../../sql/mysql/galera_check.sql"))
        ),
        // SQLite has no row locks.
        Dialect::Sqlite => templates_of!("sqlite", None, None, None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::Param;

    #[test]
    fn notifying_releases_name_the_channel() {
        let table = TableName::new("my_locks").unwrap();
        let mode = Mode {
            notify: true,
            pinned: false,
        };
        let s = Statements::new(Dialect::Postgres, &table, mode);
        for st in [&s.lease_release, &s.insert_release, &s.lease_force_release] {
            assert!(st
                .text()
                .contains("pg_notify('my_locks_released', lock_key)"));
            assert!(!st.text().contains('{'));
        }
        let plain = Statements::new(Dialect::Postgres, &table, Mode::default());
        assert!(!plain.lease_release.text().contains("pg_notify"));
    }

    #[test]
    fn every_template_renders() {
        for dialect in [Dialect::Postgres, Dialect::MySql, Dialect::Sqlite] {
            let s = Statements::new(
                dialect,
                &TableName::new("my_locks").unwrap(),
                Mode::default(),
            );
            let all = [
                &s.lease_acquire,
                &s.lease_release,
                &s.lease_extend,
                &s.lease_renew,
                &s.lease_force_release,
                &s.insert_release,
                &s.sweep,
                &s.list,
                &s.fence,
            ];
            let for_update = s
                .for_update
                .iter()
                .flat_map(|f| [&f.lock, &f.lock_nowait, &f.ensure, &f.grant]);
            // FenceConnection binds key, owner and token in this order, once each.
            assert_eq!(
                s.fence.params(),
                [Param::Key, Param::Owner, Param::Token],
                "{dialect}"
            );
            // These two name no table.
            let tableless = s.for_update.iter().flat_map(|f| {
                [Some(&f.keepalive), f.timeout.as_ref()]
                    .into_iter()
                    .flatten()
            });
            for st in tableless {
                assert!(
                    !st.text().contains("--") && !st.text().contains('{'),
                    "{dialect}"
                );
            }
            for st in all
                .into_iter()
                .chain(s.lease_survivors.as_ref())
                .chain(for_update)
            {
                assert!(st.text().contains("my_locks"), "{dialect}");
                assert!(!st.text().contains("{table}"), "{dialect}");
                assert!(
                    !st.text().contains("--"),
                    "{dialect}: comments are stripped"
                );
            }
        }
    }
}
