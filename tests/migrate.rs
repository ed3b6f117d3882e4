//! sqlock's migrations coexist with an application's own sqlx migrations in one
//! database, whichever runs first, and both migrators stay satisfied.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::borrow::Cow;

use sqlock::{DbPool, Dialect, Locker, Strategy};
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::SqlSafeStr;

/// An application's own migration set, in sqlx's default history table.
fn app_migrator() -> Migrator {
    Migrator::with_migrations(vec![Migration::new(
        1,
        Cow::Borrowed("app users"),
        MigrationType::Simple,
        "CREATE TABLE app_users (id INTEGER PRIMARY KEY, name VARCHAR(40) NOT NULL)".into_sql_str(),
        false,
    )])
}

async fn run_app(pool: &DbPool) -> anyhow::Result<()> {
    let m = app_migrator();
    match pool {
        DbPool::Postgres(p) => m.run(p).await?,
        DbPool::MySql(p) => m.run(p).await?,
        DbPool::Sqlite(p) => m.run(p).await?,
        _ => anyhow::bail!("unknown pool"),
    }
    Ok(())
}

/// A database of its own for each order, created afresh.
async fn fresh_database(b: &common::Backend, name: &str) -> anyhow::Result<DbPool> {
    let admin = b.pool().await?;
    match b.dialect {
        Dialect::Postgres => {
            b.script(
                &admin,
                &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            )
            .await?;
            b.script(&admin, &format!("CREATE DATABASE {name}")).await?;
            let url = common::postgres_url();
            let url = format!("{}/{name}", &url[..url.rfind('/').unwrap()]);
            Ok(sqlx::PgPool::connect(&url).await?.into())
        }
        Dialect::MySql => {
            b.script(
                &admin,
                &format!("DROP DATABASE IF EXISTS {name}; CREATE DATABASE {name}"),
            )
            .await?;
            let url = common::mysql_url();
            let url = format!("{}/{name}", &url[..url.rfind('/').unwrap()]);
            Ok(sqlx::MySqlPool::connect(&url).await?.into())
        }
        _ => {
            let path = std::env::temp_dir()
                .join(format!("sqlock-migrate-{}-{name}.db", std::process::id()));
            let _ = std::fs::remove_file(&path);
            let url = format!("sqlite://{}?mode=rwc", path.display());
            Ok(sqlx::SqlitePool::connect(&url).await?.into())
        }
    }
}

/// How many migrations sqlock has for `dialect`: the files of its folder.
fn files(dialect: Dialect) -> i64 {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(dialect.name());
    let n = std::fs::read_dir(dir)
        .expect("the migrations folder")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "sql"))
        })
        .count();
    i64::try_from(n).expect("a few files")
}

/// On PostgreSQL, whether the read-write rows' index (migration 20261127000001) is
/// on the lock table; the other servers need none (their keys order by bytes).
async fn assert_rw_index(b: &common::Backend, pool: &DbPool, what: &str) -> anyhow::Result<()> {
    if b.dialect == Dialect::Postgres {
        let n = b
            .scalar(
                pool,
                "SELECT COUNT(*) FROM pg_indexes WHERE tablename = 'sqlock_locks' \
                 AND indexname = 'sqlock_locks_rw_idx'",
            )
            .await?;
        assert_eq!(n, 1, "{what}: no rw index");
    }
    Ok(())
}

/// Runs `migrator` on `pool`.
async fn run(migrator: &Migrator, pool: &DbPool) -> anyhow::Result<()> {
    match pool {
        DbPool::Postgres(p) => migrator.run(p).await?,
        DbPool::MySql(p) => migrator.run(p).await?,
        DbPool::Sqlite(p) => migrator.run(p).await?,
        _ => anyhow::bail!("unknown pool"),
    }
    Ok(())
}

#[tokio::test]
async fn app_and_sqlock_migrations_coexist_in_either_order() -> anyhow::Result<()> {
    for b in common::backends("migrate").await {
        for (name, app_first) in [
            ("sqlock_mig_app_first", true),
            ("sqlock_mig_lib_first", false),
        ] {
            let pool = fresh_database(&b, name).await?;
            if app_first {
                run_app(&pool).await?;
                sqlock::migrate(&pool).await?;
            } else {
                sqlock::migrate(&pool).await?;
                run_app(&pool).await?;
            }
            // Both again: each migrator finds its history complete and unchanged.
            run_app(&pool).await?;
            sqlock::migrate(&pool).await?;
            let app = b
                .scalar(&pool, "SELECT COUNT(*) FROM _sqlx_migrations")
                .await?;
            let ours = b
                .scalar(&pool, "SELECT COUNT(*) FROM _sqlock_migrations")
                .await?;
            assert_eq!((app, ours), (1, files(b.dialect)), "{} {name}", b.dialect);
            assert_rw_index(&b, &pool, name).await?;
            // And the table works.
            let locker = Locker::new(pool.clone())?;
            let g = locker.try_acquire("k").await?.expect("k");
            assert!(g.release().await?);
            // And the semaphores' table.
            let p = locker
                .semaphore("s", 2)
                .try_acquire_many(2)
                .await?
                .expect("s");
            assert!(p.release().await?);
            pool.close().await;
        }
    }
    Ok(())
}

/// What `sqlx migrate run --source migrations/<dialect> --config migrations/sqlx.toml`
/// does, through sqlx's own resolver of the folder, and then the library's
/// `migrate`: the two agree on versions and checksums, so the library finds nothing
/// to do and no mismatch.
#[tokio::test]
async fn folder_applied_like_sqlx_cli_satisfies_the_library() -> anyhow::Result<()> {
    for b in common::backends("migrate_cli").await {
        let pool = fresh_database(&b, "sqlock_mig_cli").await?;
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("migrations")
            .join(b.dialect.name());
        let mut folder = Migrator::new(dir.as_path()).await?;
        folder.dangerous_set_table_name(sqlock::MIGRATIONS_TABLE);
        run(&folder, &pool).await?;
        assert_rw_index(&b, &pool, "sqlx-cli").await?;
        sqlock::migrate(&pool).await?;
        let ours = b
            .scalar(&pool, "SELECT COUNT(*) FROM _sqlock_migrations")
            .await?;
        assert_eq!(ours, files(b.dialect), "{}", b.dialect);
        let locker = Locker::new(pool.clone())?;
        assert!(locker.try_acquire("k").await?.expect("k").release().await?);
        pool.close().await;
    }
    Ok(())
}

/// A database that has all of sqlock's migrations but the newest (as a deployment
/// made before it has), applied like sqlx-cli, with a lock in its table: the library's
/// `migrate` applies the newest alone, and locks of every kind work on the table after.
/// (A read is taken before: this version's lease statements read the newest column,
/// `queued`, which is why the migration comes before its processes.)
#[tokio::test]
async fn an_existing_database_takes_the_newest_migration() -> anyhow::Result<()> {
    for b in common::backends("migrate_upgrade").await {
        let pool = fresh_database(&b, "sqlock_mig_upgrade").await?;
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("migrations")
            .join(b.dialect.name());
        let folder = Migrator::new(dir.as_path()).await?;
        let newest = folder.iter().map(|m| m.version).max().expect("migrations");
        let mut before = Migrator::with_migrations(
            folder
                .iter()
                .filter(|m| m.version < newest)
                .cloned()
                .collect(),
        );
        before.dangerous_set_table_name(sqlock::MIGRATIONS_TABLE);
        run(&before, &pool).await?;
        let locker = Locker::new(pool.clone())?;
        let (reader, writer) = (locker.new_handle(), locker.new_handle());
        let read = reader.read_lock("doc").try_acquire().await?.expect("doc");

        sqlock::migrate(&pool).await?;
        let plain = locker.try_acquire("plain").await?.expect("plain");
        let fair = locker
            .lock("fair")
            .strategy(Strategy::Fair)
            .try_acquire()
            .await?
            .expect("fair");
        assert!(fair.release().await?);
        let ours = b
            .scalar(&pool, "SELECT COUNT(*) FROM _sqlock_migrations")
            .await?;
        assert_eq!(ours, files(b.dialect), "{}", b.dialect);
        assert_rw_index(&b, &pool, "upgrade").await?;
        // The read taken before the migration still keeps a writer out; then not.
        assert!(writer.write_lock("doc").try_acquire().await?.is_none());
        assert!(read.release().await?);
        let write = writer.write_lock("doc").try_acquire().await?.expect("doc");
        assert!(write.release().await?);
        assert!(plain.release().await?);
        pool.close().await;
    }
    Ok(())
}
