//! sqlock's migrations coexist with an application's own sqlx migrations in one
//! database, whichever runs first, and both migrators stay satisfied.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::borrow::Cow;

use sqlock::{DbPool, Dialect, Locker};
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
        match &pool {
            DbPool::Postgres(p) => folder.run(p).await?,
            DbPool::MySql(p) => folder.run(p).await?,
            DbPool::Sqlite(p) => folder.run(p).await?,
            _ => anyhow::bail!("unknown pool"),
        }
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
