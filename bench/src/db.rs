//! The benchmark's own statements, outside the library's: set-up, clean-up, the
//! server's version, plans.
//!
//! Each is sent on the concrete sqlx pool behind the library's [`DbPool`], so
//! [`on_pool!`] picks it.

use sqlock::{DbPool, Dialect, TableName};

/// Runs `$body` with `$pool` bound to the concrete sqlx pool of `$db`.
macro_rules! on_pool {
    ($db:expr, |$pool:ident| $body:expr) => {
        match $db {
            DbPool::Postgres($pool) => $body,
            DbPool::MySql($pool) => $body,
            DbPool::Sqlite($pool) => $body,
            _ => Err(sqlx::Error::Protocol(
                "a database this benchmark does not know".into(),
            )),
        }
    };
}
pub(crate) use on_pool;

/// Runs one statement (no values bound) for its effect; the rows it touched.
pub(crate) async fn exec(db: &DbPool, sql: String) -> Result<u64, sqlx::Error> {
    let sql = sqlx::AssertSqlSafe(sql);
    on_pool!(db, |pool| sqlx::raw_sql(sql)
        .execute(pool)
        .await
        .map(|done| done.rows_affected()))
}

/// Runs a query and reads column `col` of every row as text.
pub(crate) async fn texts(
    db: &DbPool,
    sql: String,
    col: usize,
) -> Result<Vec<String>, sqlx::Error> {
    use sqlx::Row;
    let sql = sqlx::AssertSqlSafe(sql);
    on_pool!(db, |pool| {
        let rows = sqlx::query(sql).fetch_all(pool).await?;
        rows.iter().map(|r| r.try_get::<String, _>(col)).collect()
    })
}

/// Runs a query whose first row's first column is a number.
pub(crate) async fn number(db: &DbPool, sql: String) -> Result<i64, sqlx::Error> {
    use sqlx::Row;
    let sql = sqlx::AssertSqlSafe(sql);
    on_pool!(db, |pool| sqlx::query(sql)
        .fetch_one(pool)
        .await
        .and_then(|r| r.try_get::<i64, _>(0)))
}

/// A table's name quoted for the dialect (it is a validated plain identifier).
pub(crate) fn quoted(dialect: Dialect, table: &TableName) -> String {
    match dialect {
        Dialect::MySql => format!("`{table}`"),
        _ => format!("\"{table}\""),
    }
}

/// The server's name and version, as it reports them.
pub(crate) async fn server_version(db: &DbPool) -> Result<String, sqlx::Error> {
    let sql = match db.dialect() {
        Dialect::Postgres => "SELECT version()",
        Dialect::MySql => "SELECT CONCAT(VERSION(), ' ', @@version_comment)",
        _ => "SELECT 'SQLite ' || sqlite_version()",
    };
    let v = texts(db, sql.into(), 0).await?;
    Ok(v.into_iter().next().unwrap_or_default())
}
