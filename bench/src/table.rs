//! The benchmark's table and what it writes there: its keys, the TTL of its leases,
//! and leaving the table as it was found.
//!
//! A run works in a table of its own. It refuses a table that holds keys other than
//! its own, creates the table when it is missing, and afterwards drops what it created
//! or deletes its own rows from a table that was there before.

use std::time::Duration;

use sqlock::{DbPool, Dialect, TableName};

use crate::db::{exec, number, quoted};
use crate::failure::{db_failure, Failure};

/// The table a run works in unless `--table` names another.
pub(crate) const BENCH_TABLE: &str = "sqlock_bench";

/// Every key the benchmark writes starts with this, so that a table holding other
/// keys is recognised and refused.
pub(crate) const KEY_PREFIX: &str = "bench-";

/// The TTL of every lease the benchmark takes: long enough never to lapse in a run.
pub(crate) const TTL: Duration = Duration::from_secs(30);

/// The table of `table`'s semaphores, as a name the queries can quote (`None` past
/// the length of a table name, which the DELETE above then leaves alone).
fn semaphores(table: &TableName) -> Option<TableName> {
    TableName::new(&format!("{table}_semaphores")).ok()
}

/// Whether `table` exists (a count of its rows answers).
pub(crate) async fn exists(db: &DbPool, table: &TableName) -> bool {
    let sql = format!("SELECT COUNT(*) FROM {}", quoted(db.dialect(), table));
    number(db, sql).await.is_ok()
}

/// Checks that `table` holds no keys but the benchmark's; returns whether it exists.
pub(crate) async fn check_own(db: &DbPool, table: &TableName) -> Result<bool, Failure> {
    if !exists(db, table).await {
        return Ok(false);
    }
    let sql = format!(
        "SELECT COUNT(*) FROM {} WHERE lock_key NOT LIKE '{KEY_PREFIX}%' \
         AND lock_key NOT LIKE 'semaphore:{KEY_PREFIX}%'",
        quoted(db.dialect(), table)
    );
    let others = number(db, sql).await.map_err(db_failure)?;
    if others > 0 {
        return Err(Failure::Usage(format!(
            "table {table:?} has {others} rows of locks that are not the benchmark's: give \
             the benchmark a table of its own with --table"
        )));
    }
    Ok(true)
}

/// Leaves `table` as it was found: its rows of the benchmark deleted when it `existed`
/// before the run, dropped with what its DDL made beside it otherwise.
pub(crate) async fn clean_up(
    db: &DbPool,
    table: &TableName,
    existed: bool,
) -> Result<(), sqlx::Error> {
    if existed {
        let sql = format!(
            "DELETE FROM {} WHERE lock_key LIKE '{KEY_PREFIX}%' \
             OR lock_key LIKE 'semaphore:{KEY_PREFIX}%'",
            quoted(db.dialect(), table)
        );
        exec(db, sql).await?;
        // The benchmark's semaphores, in a table an earlier version may not have made.
        if let Some(semaphores) = semaphores(table) {
            let sql = format!(
                "DELETE FROM {} WHERE name LIKE '{KEY_PREFIX}%'",
                quoted(db.dialect(), &semaphores)
            );
            let _ = exec(db, sql).await;
        }
        return Ok(());
    }
    let t = table;
    let statements = match db.dialect() {
        Dialect::Postgres => vec![
            format!(r#"DROP TABLE IF EXISTS "{t}""#),
            format!(r#"DROP SEQUENCE IF EXISTS "{t}_fence_seq""#),
            format!(r#"DROP TABLE IF EXISTS "{t}_semaphores""#),
            format!(r#"DROP TABLE IF EXISTS "{t}_leaders""#),
            format!(r#"DROP TABLE IF EXISTS "{t}_queue""#),
            format!(r#"DROP TABLE IF EXISTS "{t}_quorum""#),
        ],
        Dialect::MySql => vec![
            format!("DROP TABLE IF EXISTS `{t}`"),
            format!("DROP TABLE IF EXISTS `{t}_fence`"),
            format!("DROP SEQUENCE IF EXISTS `{t}_fence_seq`"),
            format!("DROP TABLE IF EXISTS `{t}_semaphores`"),
            format!("DROP TABLE IF EXISTS `{t}_leaders`"),
            format!("DROP TABLE IF EXISTS `{t}_queue`"),
            format!("DROP TABLE IF EXISTS `{t}_quorum`"),
        ],
        _ => vec![
            format!(r#"DROP TRIGGER IF EXISTS "{t}_fence_floor""#),
            format!(r#"DROP TABLE IF EXISTS "{t}""#),
            format!(r#"DROP TABLE IF EXISTS "{t}_fence""#),
            format!(r#"DROP TABLE IF EXISTS "{t}_semaphores""#),
            format!(r#"DROP TABLE IF EXISTS "{t}_leaders""#),
            format!(r#"DROP TABLE IF EXISTS "{t}_queue""#),
            format!(r#"DROP TABLE IF EXISTS "{t}_quorum""#),
        ],
    };
    for s in statements {
        exec(db, s).await?;
    }
    Ok(())
}
