//! What every black-box test of the `sqlock` binary shares: the backends, a clean
//! table per test, and helpers to run, signal and wait for the binary as an OS process.
//!
//! PostgreSQL and MariaDB are reached at SQLOCK_TEST_POSTGRES_URL and
//! SQLOCK_TEST_MYSQL_URL (defaults: the loopback servers). A server that cannot be
//! reached fails the test when CI=true or SQLOCK_REQUIRE_SERVERS=1, and is left out
//! with a loud note otherwise. SQLite is always there: a fresh file per test.

// Each test file uses its own part of these helpers.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use sqlx::Connection as _;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_sqlock");

/// Every strategy the tests exercise; a backend leaves out those it cannot hold.
pub const STRATEGIES: &[&str] = &["lease", "insert", "for-update"];

/// The strategies whose locks are rows with a TTL: a holder that stops renewing loses
/// them at expiry, and `release --force`, `list` and `sweep` see them.
pub const LEASED: &[&str] = &["lease", "insert"];

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

/// Whether the servers are left out on purpose (`SQLOCK_TEST_SQLITE_ONLY=1`, the quick
/// path of `scripts/quick-test.sh`). Refused beside a requirement of the servers.
pub fn sqlite_only() -> bool {
    let only = std::env::var("SQLOCK_TEST_SQLITE_ONLY").is_ok_and(|v| v == "1");
    assert!(
        !(only && required()),
        "SQLOCK_TEST_SQLITE_ONLY=1 leaves out the servers that CI=true or \
         SQLOCK_REQUIRE_SERVERS=1 requires"
    );
    only
}

/// A directory of this test's own (test binaries are processes of their own, and
/// the table name tells the tests of one binary apart).
pub fn scratch_dir(table: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("sqlock-cli-{}", std::process::id()))
        .join(table);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every reachable backend, each with the test's own table dropped and created anew
/// with `sqlock --table TABLE migrate`.
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
    backends_at(table, dir, candidates)
}

/// The reachable ones of `candidates` (a backend name and its URL), each with the
/// test's own table dropped and created anew with `sqlock --table TABLE migrate`.
pub fn backends_at(
    table: &str,
    dir: PathBuf,
    candidates: Vec<(&'static str, String)>,
) -> Vec<Backend> {
    let mut out = Vec::new();
    for (name, url) in candidates {
        if name != "sqlite" && sqlite_only() {
            continue;
        }
        let b = Backend {
            name,
            url,
            table: table.to_owned(),
            dir: dir.clone(),
        };
        if let Err(e) = drop_table(&b) {
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
        let migrated = b.sqlock(&["migrate"]);
        assert!(
            migrated.status.success(),
            "{name}: sqlock migrate failed: {}",
            stderr(&migrated)
        );
        out.push(b);
    }
    out
}

/// Drops a table and what its DDL creates beside it, so a test starts clean.
pub fn drop_table(b: &Backend) -> Result<(), String> {
    let t = &b.table;
    let statements = match b.name {
        "postgres" => vec![
            format!(r#"DROP TABLE IF EXISTS "{t}""#),
            format!(r#"DROP SEQUENCE IF EXISTS "{t}_fence_seq""#),
            format!(r#"DROP TABLE IF EXISTS "{t}_leaders""#),
            format!(r#"DROP TABLE IF EXISTS "{t}_queue""#),
            format!(r#"DROP TABLE IF EXISTS "{t}_quorum""#),
        ],
        "mysql" => vec![
            format!("DROP TABLE IF EXISTS `{t}`"),
            format!("DROP TABLE IF EXISTS `{t}_fence`"),
            format!("DROP SEQUENCE IF EXISTS `{t}_fence_seq`"),
            format!("DROP TABLE IF EXISTS `{t}_leaders`"),
            format!("DROP TABLE IF EXISTS `{t}_queue`"),
            format!("DROP TABLE IF EXISTS `{t}_quorum`"),
        ],
        _ => vec![
            format!(r#"DROP TRIGGER IF EXISTS "{t}_fence_floor""#),
            format!(r#"DROP TABLE IF EXISTS "{t}""#),
            format!(r#"DROP TABLE IF EXISTS "{t}_fence""#),
            format!(r#"DROP TABLE IF EXISTS "{t}_leaders""#),
            format!(r#"DROP TABLE IF EXISTS "{t}_queue""#),
            format!(r#"DROP TABLE IF EXISTS "{t}_quorum""#),
        ],
    };
    execute_all(b, statements)
}

/// Runs `statements` one by one on `b`'s database.
pub fn execute_all(b: &Backend, statements: Vec<String>) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let connect = async {
            match b.name {
                "postgres" => {
                    let mut c = sqlx::PgConnection::connect(&b.url).await?;
                    for s in statements {
                        sqlx::raw_sql(sqlx::AssertSqlSafe(s))
                            .execute(&mut c)
                            .await?;
                    }
                    c.close().await
                }
                "mysql" => {
                    let mut c = sqlx::MySqlConnection::connect(&b.url).await?;
                    for s in statements {
                        sqlx::raw_sql(sqlx::AssertSqlSafe(s))
                            .execute(&mut c)
                            .await?;
                    }
                    c.close().await
                }
                _ => {
                    let url = format!("{}?mode=rwc", b.url);
                    let mut c = sqlx::SqliteConnection::connect(&url).await?;
                    for s in statements {
                        sqlx::raw_sql(sqlx::AssertSqlSafe(s))
                            .execute(&mut c)
                            .await?;
                    }
                    c.close().await
                }
            }
        };
        match tokio::time::timeout(Duration::from_secs(10), connect).await {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(_) => Err("no answer within 10 s".into()),
        }
    })
}

/// A key no other test uses.
pub fn key(name: &str) -> String {
    format!("{name}-{}", std::process::id())
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

impl Backend {
    /// `sqlock --database-url URL --table TABLE ARGS...`, with no URL from the
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

    /// Runs sqlock to the end.
    pub fn sqlock(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("sqlock runs")
    }

    /// Starts sqlock in the background; its stderr goes to `<dir>/<log>.stderr`.
    pub fn spawn(&self, log: &str, args: &[&str]) -> Child {
        let err = fs::File::create(self.path(&format!("{log}.stderr"))).unwrap();
        self.command(args)
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("sqlock starts")
    }

    /// What a background sqlock started with [`spawn`](Self::spawn) said.
    pub fn log(&self, log: &str) -> String {
        fs::read_to_string(self.path(&format!("{log}.stderr"))).unwrap_or_default()
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

/// Waits until `path` holds a complete line, and returns its text.
pub fn wait_for_line(path: &Path, within: Duration) -> String {
    let started = Instant::now();
    loop {
        if let Ok(text) = fs::read_to_string(path) {
            if text.ends_with('\n') {
                return text;
            }
        }
        assert!(
            started.elapsed() < within,
            "{} was not written within {within:?}",
            path.display()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for a background sqlock to exit, and returns its status (-1 for a signal).
pub fn wait_exit(child: &mut Child, within: Duration) -> i32 {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code().unwrap_or(-1);
        }
        if started.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            panic!("sqlock did not exit within {within:?}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `sig` (a name such as KILL or STOP) to a process.
pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(ok.success(), "kill -{sig} {pid}");
}

/// SIGKILLs the command of a SIGKILLed sqlock, which would run on without the lock.
/// On Linux it died with sqlock (its parent-death signal) and may be reaped already,
/// so finding no such process is fine.
pub fn kill_orphan(pid: u32) {
    let _ = Command::new("kill")
        .arg("-KILL")
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status();
}

/// Whether a process is still there (not yet reaped).
pub fn alive(pid: u32) -> bool {
    Command::new("kill")
        .arg("-0")
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// Runs `f` for every backend (and whatever else `items` pairs it with) in threads
/// of their own, and fails if any of them failed.
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
