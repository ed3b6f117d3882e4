//! What the black-box tests of the `sqlock-bench` binary share: the backends, a
//! clean table per test, and running the binary as an OS process.
//!
//! PostgreSQL and MariaDB are reached at SQLOCK_TEST_POSTGRES_URL and
//! SQLOCK_TEST_MYSQL_URL (defaults: the loopback servers). A server that cannot be
//! reached fails the test when CI=true or SQLOCK_REQUIRE_SERVERS=1, and is left out
//! with a loud note otherwise. SQLite is always there: a fresh file per test.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::thread;
use std::time::Duration;

use sqlock::{DbPool, Locker};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_sqlock-bench");

/// Every strategy the benchmark measures; a backend leaves out those it cannot hold.
pub const STRATEGIES: &[&str] = &["lease", "insert", "for-update"];

/// One database, with the table a test owns in it.
#[derive(Debug, Clone)]
pub struct Backend {
    pub name: &'static str,
    pub url: String,
    pub table: String,
    /// Where this test's files go.
    pub dir: PathBuf,
}

fn required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
        || std::env::var("SQLOCK_REQUIRE_SERVERS").is_ok_and(|v| v == "1")
}

/// A directory of this test's own (test binaries are processes of their own, and
/// the table name tells the tests of one binary apart).
pub fn scratch_dir(table: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("sqlock-bench-{}", std::process::id()))
        .join(table);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every reachable backend, each with the test's own table dropped and created anew
/// by the library.
pub fn backends(table: &str) -> Vec<Backend> {
    let dir = scratch_dir(table);
    let candidates = vec![
        (
            "sqlite",
            format!("sqlite://{}", dir.join("locks.db").display()),
        ),
        (
            "postgres",
            std::env::var("SQLOCK_TEST_POSTGRES_URL")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into()),
        ),
        (
            "mysql",
            std::env::var("SQLOCK_TEST_MYSQL_URL")
                .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into()),
        ),
    ];
    let mut out = Vec::new();
    for (name, url) in candidates {
        let b = Backend {
            name,
            url,
            table: table.to_owned(),
            dir: dir.clone(),
        };
        if let Err(e) = b.on_db(drop_and_create) {
            if required() {
                panic!("{name} is required (CI or SQLOCK_REQUIRE_SERVERS=1) but unreachable: {e}");
            }
            eprintln!(
                "\n*** NOTE: {name} at {} is unreachable ({e}); its tests are SKIPPED. \
                 Set SQLOCK_REQUIRE_SERVERS=1 to make this a failure. ***\n",
                b.url
            );
            continue;
        }
        out.push(b);
    }
    out
}

/// Drops the backend's table and what its DDL makes beside it, and creates it anew.
async fn drop_and_create(b: Backend, db: DbPool) -> Result<(), String> {
    let t = &b.table;
    let statements = match b.name {
        "postgres" => vec![
            format!(r#"DROP TABLE IF EXISTS "{t}""#),
            format!(r#"DROP SEQUENCE IF EXISTS "{t}_fence_seq""#),
        ],
        "mysql" => vec![
            format!("DROP TABLE IF EXISTS `{t}`"),
            format!("DROP TABLE IF EXISTS `{t}_fence`"),
            format!("DROP SEQUENCE IF EXISTS `{t}_fence_seq`"),
        ],
        _ => vec![
            format!(r#"DROP TRIGGER IF EXISTS "{t}_fence_floor""#),
            format!(r#"DROP TABLE IF EXISTS "{t}""#),
            format!(r#"DROP TABLE IF EXISTS "{t}_fence""#),
        ],
    };
    for s in statements {
        let s = sqlx::AssertSqlSafe(s);
        let done = match &db {
            DbPool::Postgres(p) => sqlx::raw_sql(s).execute(p).await.map(drop),
            DbPool::MySql(p) => sqlx::raw_sql(s).execute(p).await.map(drop),
            DbPool::Sqlite(p) => sqlx::raw_sql(s).execute(p).await.map(drop),
            _ => unreachable!("BUG: the tests know three databases"),
        };
        done.map_err(|e| e.to_string())?;
    }
    locker(&b, db)?
        .create_table()
        .await
        .map_err(|e| e.to_string())
}

/// A handle on the backend's table.
pub fn locker(b: &Backend, db: DbPool) -> Result<Locker, String> {
    Locker::builder(db)
        .table(b.table.as_str())
        .build()
        .map_err(|e| e.to_string())
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

impl Backend {
    /// `sqlock-bench --database-url URL --table TABLE ARGS...`, with no URL from the
    /// environment.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.arg("--database-url")
            .arg(&self.url)
            .arg("--table")
            .arg(&self.table)
            .args(args)
            .env_remove("DATABASE_URL")
            .env_remove("SQLOCK_DATABASE_URL");
        c
    }

    /// Runs the benchmark to the end.
    pub fn bench(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("sqlock-bench runs")
    }

    /// Runs `f` with a pool on this backend's database, on a runtime of its own,
    /// within 10 s.
    pub fn on_db<F, Fut>(&self, f: F) -> Result<(), String>
    where
        F: FnOnce(Backend, DbPool) -> Fut,
        Fut: std::future::Future<Output = Result<(), String>>,
    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let work = async {
                let db: DbPool = match self.name {
                    "postgres" => sqlx::PgPool::connect(&self.url).await?.into(),
                    "mysql" => sqlx::MySqlPool::connect(&self.url).await?.into(),
                    _ => sqlx::SqlitePool::connect(&format!("{}?mode=rwc", self.url))
                        .await?
                        .into(),
                };
                let done = f(self.clone(), db.clone()).await;
                db.close().await;
                Ok::<_, sqlx::Error>(done)
            };
            match tokio::time::timeout(Duration::from_secs(10), work).await {
                Ok(Ok(done)) => done,
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("no answer within 10 s".into()),
            }
        })
    }

    /// A file in this backend's part of the scratch directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{}-{name}", self.name))
    }

    /// The strategies of [`STRATEGIES`] this backend can hold: SQLite has no row locks.
    pub fn strategies(&self) -> Vec<&'static str> {
        STRATEGIES
            .iter()
            .copied()
            .filter(|s| self.name != "sqlite" || *s != "for-update")
            .collect()
    }
}

/// Runs `f` for every backend in threads of their own, and fails if any of them
/// failed.
pub fn in_parallel<T: Send + 'static>(items: Vec<T>, f: fn(T)) {
    let handles: Vec<_> = items
        .into_iter()
        .map(|item| thread::spawn(move || f(item)))
        .collect();
    let failed = handles.into_iter().filter_map(|h| h.join().err()).count();
    assert_eq!(
        failed, 0,
        "{failed} of the parallel cases failed (see above)"
    );
}
