//! The baselines: the library's own statements sent raw through sqlx, the servers'
//! native locks, and Redis.
//!
//! The raw statements are the files of `sql/<dialect>/` the library embeds, rendered
//! the way the library renders them (table name written in, comments dropped, named
//! parameters turned into the dialect's placeholders), so the raw baseline sends the
//! same text with the same values and differs from the library only by what the
//! library does around it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlock::{DbPool, Dialect, Strategy, TableName};
use sqlx::{AssertSqlSafe, Database, Encode, Type};

/// One value a statement takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Param {
    Key,
    Owner,
    TtlUs,
    Token,
    Strategy,
    WaitUs,
    Setting,
}

/// A rendered statement.
#[derive(Debug, Clone)]
pub(crate) struct Stmt {
    text: Arc<str>,
    params: Vec<Param>,
}

/// The values one statement may take.
#[derive(Debug, Clone)]
pub(crate) struct Values {
    pub(crate) key: String,
    pub(crate) owner: String,
    pub(crate) strategy: Strategy,
    pub(crate) ttl_us: i64,
    pub(crate) token: i64,
}

impl Stmt {
    /// Renders a `sql/` template as the library does: `{table}` written in, `--`
    /// comments dropped, `:name` turned into `$n` (a name used twice bound once) on
    /// PostgreSQL and `?` (bound at every use) elsewhere.
    pub(crate) fn render(template: &str, table: &TableName, dialect: Dialect) -> Self {
        let numbered = dialect == Dialect::Postgres;
        let template = template.replace("{table}", table.as_str());
        let mut text = String::with_capacity(template.len());
        let mut params: Vec<Param> = Vec::new();
        let mut chars = template.char_indices().peekable();
        let (mut in_string, mut prev) = (false, '\0');
        while let Some((i, c)) = chars.next() {
            if !in_string && c == '-' && chars.peek().is_some_and(|&(_, n)| n == '-') {
                for (_, n) in chars.by_ref() {
                    if n == '\n' {
                        break;
                    }
                }
                continue;
            }
            if c == '\'' {
                in_string = !in_string;
            }
            let starts_param = !in_string
                && c == ':'
                && prev != ':'
                && chars.peek().is_some_and(|&(_, n)| n.is_ascii_lowercase());
            if !starts_param {
                text.push(c);
                prev = c;
                continue;
            }
            let mut end = i + 1;
            while let Some(&(j, n)) = chars.peek() {
                if n.is_ascii_lowercase() || n == '_' {
                    end = j + n.len_utf8();
                    chars.next();
                } else {
                    break;
                }
            }
            let param = match &template[i + 1..end] {
                "key" => Param::Key,
                "owner" => Param::Owner,
                "ttl_us" => Param::TtlUs,
                "token" => Param::Token,
                "strategy" => Param::Strategy,
                "setting" => Param::Setting,
                // The only other name the statements used here take.
                _ => Param::WaitUs,
            };
            if numbered {
                let n = match params.iter().position(|p| *p == param) {
                    Some(n) => n + 1,
                    None => {
                        params.push(param);
                        params.len()
                    }
                };
                text.push('$');
                text.push_str(&n.to_string());
            } else {
                params.push(param);
                text.push('?');
            }
            prev = 'x';
        }
        Self {
            text: text.into(),
            params,
        }
    }

    /// The rendered SQL.
    #[cfg(test)]
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    fn bind<'a, DB>(&self, v: &'a Values) -> sqlx::query::Query<'a, DB, DB::Arguments>
    where
        DB: Database,
        &'a str: Encode<'a, DB> + Type<DB>,
        i64: Encode<'a, DB> + Type<DB>,
    {
        let mut query = sqlx::query(AssertSqlSafe(self.text.clone()));
        for p in &self.params {
            query = match p {
                Param::Key => query.bind(v.key.as_str()),
                Param::Owner => query.bind(v.owner.as_str()),
                Param::TtlUs => query.bind(v.ttl_us),
                Param::Token => query.bind(v.token),
                Param::Strategy => query.bind(v.strategy.name()),
                // Not waiting: the statements run here never wait in the database.
                Param::WaitUs => query.bind(1_000_i64),
                // The lock_timeout the for-update grant puts back: the benchmark's pools
                // have none of their own.
                Param::Setting => query.bind("0"),
            };
        }
        query
    }
}

/// The statements of one dialect that an acquisition and a release send.
#[derive(Debug, Clone)]
pub(crate) struct RawStatements {
    pub(crate) acquire: Stmt,
    pub(crate) lease_release: Stmt,
    pub(crate) insert_release: Stmt,
    fu_timeout: Option<Stmt>,
    pub(crate) fu_lock_nowait: Option<Stmt>,
    fu_ensure: Option<Stmt>,
    fu_grant: Option<Stmt>,
}

macro_rules! sql {
    ($dir:literal, $file:literal) => {
        include_str!(concat!("../../../sql/", $dir, "/", $file, ".sql"))
    };
}

macro_rules! templates {
    ($dir:literal) => {
        [
            sql!($dir, "lease_acquire"),
            sql!($dir, "lease_release"),
            sql!($dir, "insert_release"),
        ]
    };
}

impl RawStatements {
    /// The statements for `table` in `dialect`.
    pub(crate) fn new(dialect: Dialect, table: &TableName) -> Self {
        let r = |t: &str| Stmt::render(t, table, dialect);
        let (base, fu): ([&str; 3], Option<[Option<&str>; 4]>) = match dialect {
            Dialect::Postgres => (
                templates!("postgres"),
                Some([
                    Some(sql!("postgres", "for_update_begin_nowait")),
                    Some(sql!("postgres", "for_update_lock_nowait")),
                    Some(sql!("postgres", "for_update_ensure")),
                    Some(sql!("postgres", "for_update_grant")),
                ]),
            ),
            Dialect::MySql => (
                templates!("mysql"),
                Some([
                    None,
                    Some(sql!("mysql", "for_update_lock_nowait")),
                    Some(sql!("mysql", "for_update_ensure")),
                    Some(sql!("mysql", "for_update_grant")),
                ]),
            ),
            _ => (templates!("sqlite"), None),
        };
        let fu = fu.unwrap_or_default();
        Self {
            acquire: r(base[0]),
            lease_release: r(base[1]),
            insert_release: r(base[2]),
            fu_timeout: fu[0].map(r),
            fu_lock_nowait: fu[1].map(r),
            fu_ensure: fu[2].map(r),
            fu_grant: fu[3].map(r),
        }
    }
}

/// What a raw cycle reports: the acquisition's latency, or `None` when the lock was
/// busy (never, on distinct keys).
pub(crate) type Cycle = Result<Option<Duration>, sqlx::Error>;

/// Runs `$body` with `$pool` bound to the concrete sqlx pool.
macro_rules! on_pool {
    ($db:expr, |$pool:ident| $body:expr) => {
        match $db {
            DbPool::Postgres($pool) => $body,
            DbPool::MySql($pool) => $body,
            DbPool::Sqlite($pool) => $body,
            _ => Err(sqlx::Error::Protocol(
                "a database this tool does not know".into(),
            )),
        }
    };
}

/// One acquisition and release of `v.key` with the raw statements of a strategy.
pub(crate) async fn cycle(db: &DbPool, s: &RawStatements, v: &mut Values) -> Cycle {
    match v.strategy {
        Strategy::ForUpdate => on_pool!(db, |pool| for_update_cycle(pool, s, v).await),
        _ => on_pool!(db, |pool| lease_cycle(pool, s, v).await),
    }
}

async fn lease_cycle<DB>(pool: &sqlx::Pool<DB>, s: &RawStatements, v: &mut Values) -> Cycle
where
    DB: Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'a> &'a str: Encode<'a, DB> + Type<DB>,
    for<'a> i64: Encode<'a, DB> + sqlx::Decode<'a, DB> + Type<DB>,
    for<'a> String: sqlx::Decode<'a, DB> + Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    use sqlx::Row;
    let started = Instant::now();
    let row = s.acquire.bind::<DB>(v).fetch_optional(pool).await?;
    let latency = started.elapsed();
    let Some(row) = row else {
        return Ok(None);
    };
    let owner: String = row.try_get(0)?;
    if owner != v.owner {
        return Ok(None);
    }
    v.token = row.try_get(1)?;
    let release = match v.strategy {
        Strategy::Insert => &s.insert_release,
        _ => &s.lease_release,
    };
    release.bind::<DB>(v).execute(pool).await?;
    Ok(Some(latency))
}

async fn for_update_cycle<DB>(pool: &sqlx::Pool<DB>, s: &RawStatements, v: &mut Values) -> Cycle
where
    DB: Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'a> &'a str: Encode<'a, DB> + Type<DB>,
    for<'a> i64: Encode<'a, DB> + Type<DB>,
{
    let (Some(lock), Some(ensure), Some(grant)) = (&s.fu_lock_nowait, &s.fu_ensure, &s.fu_grant)
    else {
        return Err(sqlx::Error::Protocol("no for-update statements".into()));
    };
    let started = Instant::now();
    for _ in 0..2 {
        let mut tx = pool.begin().await?;
        if let Some(timeout) = &s.fu_timeout {
            timeout.bind::<DB>(v).execute(&mut *tx).await?;
        }
        if lock.bind::<DB>(v).fetch_optional(&mut *tx).await?.is_none() {
            // No row yet: made once per key, outside the transaction, as the library does.
            tx.rollback().await?;
            ensure.bind::<DB>(v).execute(pool).await?;
            continue;
        }
        grant.bind::<DB>(v).execute(&mut *tx).await?;
        let latency = started.elapsed();
        tx.commit().await?;
        return Ok(Some(latency));
    }
    Ok(None)
}

/// A number for a key, for PostgreSQL's advisory locks (FNV-1a).
fn key_number(key: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h as i64
}

/// A connection holding or taking a server's native session lock: PostgreSQL's
/// advisory locks or MariaDB's `GET_LOCK`. Session locks belong to their connection, so
/// a lock and its unlock go through the same one.
pub(crate) enum NativeConn {
    /// PostgreSQL: `pg_try_advisory_lock` / `pg_advisory_lock` / `pg_advisory_unlock`.
    Postgres(sqlx::pool::PoolConnection<sqlx::Postgres>),
    /// MariaDB: `GET_LOCK(key, 0)` / `GET_LOCK(key, 10)` / `RELEASE_LOCK`.
    MySql(sqlx::pool::PoolConnection<sqlx::MySql>),
}

impl NativeConn {
    /// A connection of the pool; an error on SQLite, which has no such locks.
    pub(crate) async fn acquire(db: &DbPool) -> Result<Self, sqlx::Error> {
        match db {
            DbPool::Postgres(pool) => Ok(Self::Postgres(pool.acquire().await?)),
            DbPool::MySql(pool) => Ok(Self::MySql(pool.acquire().await?)),
            _ => Err(sqlx::Error::Protocol("SQLite has no native lock".into())),
        }
    }

    /// Takes the lock on `key`: at once or not at all, or with `wait`, waiting for it.
    pub(crate) async fn lock(&mut self, key: &str, wait: bool) -> Result<bool, sqlx::Error> {
        use sqlx::Row;
        match self {
            Self::Postgres(conn) => {
                let n = key_number(key);
                if wait {
                    sqlx::query("SELECT pg_advisory_lock($1)")
                        .bind(n)
                        .execute(&mut **conn)
                        .await?;
                    return Ok(true);
                }
                sqlx::query("SELECT pg_try_advisory_lock($1)")
                    .bind(n)
                    .fetch_one(&mut **conn)
                    .await?
                    .try_get(0)
            }
            Self::MySql(conn) => {
                let got: Option<i64> = sqlx::query("SELECT GET_LOCK(?, ?)")
                    .bind(key)
                    .bind(if wait { 10_i64 } else { 0 })
                    .fetch_one(&mut **conn)
                    .await?
                    .try_get(0)?;
                Ok(got == Some(1))
            }
        }
    }

    /// Gives the lock on `key` back.
    pub(crate) async fn unlock(&mut self, key: &str) -> Result<(), sqlx::Error> {
        match self {
            Self::Postgres(conn) => sqlx::query("SELECT pg_advisory_unlock($1)")
                .bind(key_number(key))
                .execute(&mut **conn)
                .await
                .map(drop),
            Self::MySql(conn) => sqlx::query("SELECT RELEASE_LOCK(?)")
                .bind(key)
                .execute(&mut **conn)
                .await
                .map(drop),
        }
    }
}

/// One acquisition and release of the server's native lock on `key`, on a connection
/// taken from the pool for the two statements.
pub(crate) async fn native_cycle(db: &DbPool, key: &str) -> Cycle {
    let mut conn = NativeConn::acquire(db).await?;
    let started = Instant::now();
    if !conn.lock(key, false).await? {
        return Ok(None);
    }
    let latency = started.elapsed();
    conn.unlock(key).await?;
    Ok(Some(latency))
}

/// The server's plan for `st` with `v` bound, one line of text per row: `EXPLAIN` on
/// PostgreSQL, `EXPLAIN FORMAT=JSON` on MariaDB, `EXPLAIN QUERY PLAN` on SQLite.
pub(crate) async fn explain(
    db: &DbPool,
    st: &Stmt,
    v: &Values,
) -> Result<Vec<String>, sqlx::Error> {
    use sqlx::Row;
    let (prefix, col) = match db.dialect() {
        Dialect::Postgres => ("EXPLAIN ", 0),
        Dialect::MySql => ("EXPLAIN FORMAT=JSON ", 0),
        _ => ("EXPLAIN QUERY PLAN ", 3),
    };
    let prefixed = Stmt {
        text: format!("{prefix}{}", st.text).into(),
        params: st.params.clone(),
    };
    let lines: Vec<String> = on_pool!(db, |pool| {
        let rows = prefixed.bind(v).fetch_all(pool).await?;
        rows.iter()
            .map(|r| r.try_get::<String, _>(col))
            .collect::<Result<Vec<String>, sqlx::Error>>()
    })?;
    Ok(lines
        .iter()
        .flat_map(|l| l.lines().map(str::to_owned))
        .collect())
}

/// Holds a lock for `hold`; no wait at all for zero.
pub(crate) async fn hold_for(hold: Duration) {
    if !hold.is_zero() {
        tokio::time::sleep(hold).await;
    }
}

/// The Redis baseline: `SET key owner NX PX ttl`, then a Lua script that deletes the
/// key only while it still holds the owner (the usual single-instance Redis lock).
#[cfg(feature = "redis-baseline")]
pub(crate) mod redis_lock {
    use std::time::{Duration, Instant};

    /// One worker's connection.
    pub(crate) struct RedisWorker {
        conn: redis::aio::MultiplexedConnection,
        release: redis::Script,
    }

    impl RedisWorker {
        /// Connects to `url`.
        pub(crate) async fn connect(url: &str) -> Result<Self, String> {
            let client = redis::Client::open(url).map_err(|e| e.to_string())?;
            let conn = client
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| e.to_string())?;
            let release = redis::Script::new(
                "if redis.call('get', KEYS[1]) == ARGV[1] then \
                 return redis.call('del', KEYS[1]) else return 0 end",
            );
            Ok(Self { conn, release })
        }

        /// One acquisition and release; the acquisition's latency, or `None` when busy.
        pub(crate) async fn cycle(
            &mut self,
            key: &str,
            owner: &str,
            ttl: Duration,
        ) -> Result<Option<Duration>, String> {
            let started = Instant::now();
            let set: Option<String> = redis::cmd("SET")
                .arg(key)
                .arg(owner)
                .arg("NX")
                .arg("PX")
                .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
                .query_async(&mut self.conn)
                .await
                .map_err(|e| e.to_string())?;
            let latency = started.elapsed();
            if set.is_none() {
                return Ok(None);
            }
            let _: i64 = self
                .release
                .key(key)
                .arg(owner)
                .invoke_async(&mut self.conn)
                .await
                .map_err(|e| e.to_string())?;
            Ok(Some(latency))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_as_the_library_does() {
        let t = TableName::new("bench_t").unwrap();
        let pg = RawStatements::new(Dialect::Postgres, &t);
        assert!(pg.acquire.text().contains("\"bench_t\""));
        assert!(!pg.acquire.text().contains("--"));
        assert!(pg.lease_release.text().contains("lock_key = $1"));
        let my = RawStatements::new(Dialect::MySql, &t);
        assert!(my.acquire.text().contains("`bench_t`"));
        assert!(!my.acquire.text().contains(":key"));
        assert!(RawStatements::new(Dialect::Sqlite, &t)
            .fu_lock_nowait
            .is_none());
    }
}
