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

/// Declares every migration once, in the order they apply: its version, its
/// description, its file's name after the version, and the folders of
/// `migrations/<dialect>/` that have it. Gives `MIGRATIONS`, each file of each folder.
macro_rules! migrations {
    ($( $(#[$meta:meta])* $version:literal $description:literal
        = $file:literal in [$($dir:literal),+]; )+) => {
        /// Every migration, with the folder (the dialect) it lies in, in order.
        const MIGRATIONS: &[(&str, File)] = &[
            $($( (
                $dir,
                File {
                    version: $version,
                    description: $description,
                    sql: include_str!(concat!(
                        "../../migrations/", $dir, "/", stringify!($version), "_", $file, ".sql"
                    )),
                },
            ), )+)+
        ];
    };
}

migrations! {
    /// The lock table.
    20261122000000 "create sqlock locks" = "create_sqlock_locks"
        in ["postgres", "mysql", "sqlite"];
    /// The sweep procedure, for a scheduler inside the database; SQLite has none.
    20261124000000 "create sqlock sweep" = "create_sqlock_sweep"
        in ["postgres", "mysql"];
    /// The presence column (see `LockerBuilder::presence`); SQLite keeps presence
    /// markers beside the database, not in the table.
    20261125000000 "add sqlock presence" = "add_sqlock_presence"
        in ["postgres", "mysql"];
    /// The table of election leaders (see `Locker::election`).
    20261126000000 "create sqlock leaders" = "create_sqlock_leaders"
        in ["postgres", "mysql", "sqlite"];
    /// The queue of the fair strategy's waiters.
    20261126000001 "create sqlock queue" = "create_sqlock_queue"
        in ["postgres", "mysql", "sqlite"];
    /// The table of semaphores (see `Locker::semaphore`).
    20261127000000 "create sqlock semaphores" = "create_sqlock_semaphores"
        in ["postgres", "mysql", "sqlite"];
    /// The index of read-write locks' rows, in byte order whatever the database's
    /// collation (see `Locker::read_lock`); MariaDB's and SQLite's primary keys
    /// already order keys by their bytes.
    20261127000001 "add sqlock rw index" = "add_sqlock_rw_index"
        in ["postgres"];
    /// The presence column of the fair strategy's places, which a handoff copies onto
    /// its grant; SQLite's markers are files beside the database.
    20261202000000 "add sqlock queue presence" = "add_sqlock_queue_presence"
        in ["postgres", "mysql"];
    /// The quorum tokens of quorum locks (see `Quorum`).
    20261203000000 "create sqlock quorum" = "create_sqlock_quorum"
        in ["postgres", "mysql", "sqlite"];
    /// The fair strategy's `queued` flag on the lock table, which lets a fair lock
    /// nobody waits for be taken and given back in one statement each; SQLite's
    /// statements read the queue itself (its writers run one at a time).
    20261204000000 "add sqlock queued" = "add_sqlock_queued"
        in ["postgres", "mysql"];
    /// The sweep procedure replaced: it keeps the row of a key fair waiters are
    /// queued for, as the library's sweep does.
    20261205000000 "replace sqlock sweep" = "replace_sqlock_sweep"
        in ["postgres", "mysql"];
}

/// The migrations of `dialect`, in order.
fn files(dialect: Dialect) -> impl Iterator<Item = &'static File> {
    let dir = match dialect {
        Dialect::Postgres => "postgres",
        Dialect::MySql => "mysql",
        Dialect::Sqlite => "sqlite",
    };
    MIGRATIONS
        .iter()
        .filter(move |(d, _)| *d == dir)
        .map(|(_, f)| f)
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
/// `pool` is any pool [`Locker::builder`](crate::Locker::builder) takes: an sqlx pool
/// or a [`DbPool`], by value or by reference.
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
/// sqlock::migrate(&pool).await?;
/// # Ok(())
/// # }
/// ```
pub async fn migrate(pool: impl Into<DbPool>) -> Result<()> {
    let pool = pool.into();
    pool.migrate(&migrator(pool.dialect())).await
}

fn migrator(dialect: Dialect) -> Migrator {
    let migrations = files(dialect)
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

    /// The list is every file of every folder, in version order: a file added to
    /// `migrations/<dialect>/` and not declared fails here.
    #[test]
    fn every_migration_file_is_declared_once_in_order() {
        for (dialect, dir) in [
            (Dialect::Postgres, "postgres"),
            (Dialect::MySql, "mysql"),
            (Dialect::Sqlite, "sqlite"),
        ] {
            let folder = format!("{}/migrations/{dir}", env!("CARGO_MANIFEST_DIR"));
            let mut on_disk: Vec<String> = std::fs::read_dir(&folder)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| n.ends_with(".sql"))
                .collect();
            on_disk.sort();
            let declared: Vec<String> = files(dialect)
                .map(|f| format!("{}_{}.sql", f.version, f.description.replace(' ', "_")))
                .collect();
            assert_eq!(declared, on_disk, "{dialect}");
            let versions: Vec<i64> = files(dialect).map(|f| f.version).collect();
            assert!(versions.windows(2).all(|w| w[0] < w[1]), "{dialect}");
        }
    }

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
