//! The lock table's DDL and the migrations that create it.
//!
//! The files in `migrations/<dialect>/` are the one source: sqlx-cli applies them, the
//! library embeds them for [`migrate`], and [`schema`] renders them for another table
//! name.

use std::borrow::Cow;

use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::SqlSafeStr;

use super::{DbPool, Dialect};
use crate::support::error::Result;
use crate::support::validate::{TableName, DEFAULT_TABLE};

/// The table in which [`migrate`] records sqlock's migrations, apart from the
/// application's own `_sqlx_migrations`.
pub const MIGRATIONS_TABLE: &str = "_sqlock_migrations";

/// One migration as it lies in `migrations/<dialect>/`.
struct File {
    version: i64,
    description: &'static str,
    sql: &'static str,
}

/// The migration that creates the lock table, in `migrations/$dir/`.
macro_rules! create_table {
    ($dir:literal) => {
        File {
            version: 20261122000000,
            description: "create sqlock locks",
            sql: include_str!(concat!(
                "../../migrations/",
                $dir,
                "/20261122000000_create_sqlock_locks.sql"
            )),
        }
    };
}

/// The migration that creates the sweep procedure, for a scheduler inside the
/// database; SQLite has none.
macro_rules! create_sweep {
    ($dir:literal) => {
        File {
            version: 20261124000000,
            description: "create sqlock sweep",
            sql: include_str!(concat!(
                "../../migrations/",
                $dir,
                "/20261124000000_create_sqlock_sweep.sql"
            )),
        }
    };
}

/// The migration that adds the presence column (see `LockerBuilder::presence`); SQLite
/// keeps presence markers beside the database, not in the table.
macro_rules! add_presence {
    ($dir:literal) => {
        File {
            version: 20261125000000,
            description: "add sqlock presence",
            sql: include_str!(concat!(
                "../../migrations/",
                $dir,
                "/20261125000000_add_sqlock_presence.sql"
            )),
        }
    };
}

/// The migration that creates the table of election leaders (see
/// `Locker::election`).
macro_rules! create_leaders {
    ($dir:literal) => {
        File {
            version: 20261126000000,
            description: "create sqlock leaders",
            sql: include_str!(concat!(
                "../../migrations/",
                $dir,
                "/20261126000000_create_sqlock_leaders.sql"
            )),
        }
    };
}

/// The migration that creates the queue of the fair strategy's waiters.
macro_rules! create_queue {
    ($dir:literal) => {
        File {
            version: 20261126000001,
            description: "create sqlock queue",
            sql: include_str!(concat!(
                "../../migrations/",
                $dir,
                "/20261126000001_create_sqlock_queue.sql"
            )),
        }
    };
}

/// The migration that creates the table of semaphores (see `Locker::semaphore`).
macro_rules! create_semaphores {
    ($dir:literal) => {
        File {
            version: 20261127000000,
            description: "create sqlock semaphores",
            sql: include_str!(concat!(
                "../../migrations/",
                $dir,
                "/20261127000000_create_sqlock_semaphores.sql"
            )),
        }
    };
}

/// The migration that adds the index of read-write locks' rows, in byte order
/// whatever the database's collation (see `Locker::read_lock`); MariaDB's and SQLite's
/// primary keys already order keys by their bytes.
macro_rules! add_rw_index {
    ($dir:literal) => {
        File {
            version: 20261127000001,
            description: "add sqlock rw index",
            sql: include_str!(concat!(
                "../../migrations/",
                $dir,
                "/20261127000001_add_sqlock_rw_index.sql"
            )),
        }
    };
}

fn files(dialect: Dialect) -> &'static [File] {
    match dialect {
        Dialect::Postgres => &[
            create_table!("postgres"),
            create_sweep!("postgres"),
            add_presence!("postgres"),
            create_leaders!("postgres"),
            create_queue!("postgres"),
            create_semaphores!("postgres"),
            add_rw_index!("postgres"),
        ],
        Dialect::MySql => &[
            create_table!("mysql"),
            create_sweep!("mysql"),
            add_presence!("mysql"),
            create_leaders!("mysql"),
            create_queue!("mysql"),
            create_semaphores!("mysql"),
        ],
        Dialect::Sqlite => &[
            create_table!("sqlite"),
            create_leaders!("sqlite"),
            create_queue!("sqlite"),
            create_semaphores!("sqlite"),
        ],
    }
}

/// The DDL that creates sqlock's lock table, named `table`, in `dialect`.
///
/// It is the text of the dialect's migrations with the table name (and the names
/// derived from it: sequence, index, trigger) replaced. Every statement says
/// `IF NOT EXISTS`, so running it twice is harmless.
///
/// # Examples
///
/// ```
/// use sqlock::{schema, Dialect, TableName};
///
/// let ddl = schema(Dialect::Postgres, &TableName::new("job_locks")?);
/// assert!(ddl.contains(r#"CREATE TABLE IF NOT EXISTS "job_locks""#));
/// # Ok::<(), sqlock::Error>(())
/// ```
pub fn schema(dialect: Dialect, table: &TableName) -> String {
    files(dialect)
        .iter()
        .map(|f| f.sql.replace(DEFAULT_TABLE, table.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Creates sqlock's lock table in the pool's database, under the default name
/// (`sqlock_locks`), by applying the migrations in `migrations/<dialect>/`.
///
/// The history is kept in its own table, [`MIGRATIONS_TABLE`], so an application's
/// own sqlx migrations (in `_sqlx_migrations`) are not disturbed, whichever runs first.
/// sqlx-cli records into the same table when given `--config migrations/sqlx.toml`,
/// and the two then agree on what was applied.
///
/// For a table of another name, run the DDL of [`schema`] instead, or
/// [`Locker::create_table`](crate::Locker::create_table).
///
/// # Errors
///
/// [`Error::Migrate`](crate::Error::Migrate) when a migration fails or the recorded
/// history does not match the embedded files.
///
/// # Cancel safety
///
/// If the future is dropped a migration may or may not have been applied; each runs in a
/// transaction of its own where the server allows, and running `migrate` again finishes the
/// job.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), sqlock::Error> {
/// # let dir = std::env::temp_dir().join(format!("sqlock-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// # std::env::set_current_dir(&dir).unwrap();
/// let pool = sqlx::SqlitePool::connect("sqlite:locks.db?mode=rwc").await?;
/// sqlock::migrate(&pool.into()).await?;
/// # Ok(())
/// # }
/// ```
pub async fn migrate(pool: &DbPool) -> Result<()> {
    pool.migrate(&migrator(pool.dialect())).await
}

fn migrator(dialect: Dialect) -> Migrator {
    let migrations = files(dialect)
        .iter()
        .map(|f| {
            Migration::new(
                f.version,
                Cow::Borrowed(f.description),
                MigrationType::Simple,
                f.sql.into_sql_str(),
                false,
            )
        })
        .collect();
    let mut migrator = Migrator::with_migrations(migrations);
    migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
    migrator
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ddl_renames_every_object() {
        for dialect in [Dialect::Postgres, Dialect::MySql, Dialect::Sqlite] {
            let ddl = schema(dialect, &TableName::new("other").unwrap());
            assert!(!ddl.contains("sqlock_locks"), "{dialect}");
            assert!(ddl.contains("other_expires_at_idx"), "{dialect}");
            assert!(ddl.contains("other_queue_key_idx"), "{dialect}");
        }
        assert_eq!(
            schema(Dialect::Sqlite, &TableName::default()),
            files(Dialect::Sqlite)
                .iter()
                .map(|f| f.sql)
                .collect::<Vec<_>>()
                .join("\n")
        );
        assert!(schema(Dialect::Postgres, &TableName::new("other").unwrap())
            .contains(r#"CREATE TABLE IF NOT EXISTS "other_leaders""#));
        assert!(
            schema(Dialect::Postgres, &TableName::new("other").unwrap()).contains(
                r#"CREATE INDEX IF NOT EXISTS "other_rw_idx" ON "other" ((lock_key COLLATE "C"))"#
            )
        );
    }
}
