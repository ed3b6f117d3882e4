//! The tool behind PgBouncer in transaction pooling mode (`scripts/ha.sh`, port 6433,
//! in front of the main PostgreSQL): with `--transaction-pooling` (or
//! `SQLOCK_TRANSACTION_POOLING=1`) every command works there; without it a command
//! that meets a prepared statement left on a pooled server connection exits 69 with a
//! message that says what to set, never 70 with the driver's words.

mod common;

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use common::{stderr, stdout, wait_for_line, Backend};

const PGBOUNCER_URL: &str = "postgres://postgres@127.0.0.1:6433/test";

fn required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
        || std::env::var("SQLOCK_REQUIRE_SERVERS").is_ok_and(|v| v == "1")
}

/// The PgBouncer backend, or `None` (with a loud note) when it is not running and
/// servers are not required. Only an unreachable PgBouncer is skipped: any other
/// failure of the first command through it is a failure of the test.
fn pgbouncer(table: &str) -> Option<Backend> {
    let b = Backend {
        name: "pgbouncer",
        url: std::env::var("SQLOCK_TEST_PGBOUNCER_URL").unwrap_or_else(|_| PGBOUNCER_URL.into()),
        table: table.to_owned(),
        dir: common::scratch_dir(table),
    };
    if let Err(e) = TcpStream::connect_timeout(&pgbouncer_addr(&b.url), Duration::from_secs(5)) {
        if required() {
            panic!("PgBouncer is required (CI or SQLOCK_REQUIRE_SERVERS=1) but unreachable: {e}");
        }
        eprintln!("\n*** NOTE: PgBouncer unreachable ({e}); its tests are SKIPPED. ***\n");
        return None;
    }
    let migrated = b.sqlock(&["--transaction-pooling", "migrate"]);
    assert!(
        migrated.status.success(),
        "migrate through a reachable PgBouncer failed: {}",
        stderr(&migrated)
    );
    Some(b)
}

/// The host and port of a PgBouncer URL.
fn pgbouncer_addr(url: &str) -> SocketAddr {
    let rest = url.split_once('@').map_or(url, |(_, r)| r);
    let host_port = rest.split('/').next().unwrap_or(rest);
    host_port
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .unwrap_or_else(|| panic!("no address in {url}"))
}

#[test]
fn every_command_works_through_pgbouncer_with_transaction_pooling() {
    let Some(b) = pgbouncer("cli_pgbouncer") else {
        return;
    };
    let key = common::key("pgb");
    // migrate ran in pgbouncer(); again, it has nothing to do and says so.
    let again = b.sqlock(&["--transaction-pooling", "migrate"]);
    assert!(again.status.success(), "migrate: {}", stderr(&again));

    for strategy in ["lease", "insert", "for-update"] {
        let o = b.sqlock(&[
            "--transaction-pooling",
            "run",
            "--strategy",
            strategy,
            "--no-wait",
            &key,
            "--",
            "echo",
            "hi",
        ]);
        assert_eq!(o.status.code(), Some(0), "{strategy}: {}", stderr(&o));
        assert_eq!(stdout(&o).trim(), "hi", "{strategy}");
    }

    // The environment says the same as the flag, for cron entries.
    let o = b
        .command(&["run", "--no-wait", &key, "--", "true"])
        .env("SQLOCK_TRANSACTION_POOLING", "1")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "env: {}", stderr(&o));

    // A holder, seen by list, released by force (its command is stopped, exit 76).
    let started = b.path("started");
    let note = format!("echo up > {}; exec sleep 30", started.display());
    let mut holder = b.spawn(
        "holder",
        &[
            "--transaction-pooling",
            "run",
            "--ttl",
            "6s",
            &key,
            "--",
            "sh",
            "-c",
            &note,
        ],
    );
    wait_for_line(&started, Duration::from_secs(20));
    let listed = b.sqlock(&["--transaction-pooling", "list", "--json"]);
    assert!(listed.status.success(), "list: {}", stderr(&listed));
    assert!(stdout(&listed).contains(&key), "list: {}", stdout(&listed));
    let released = b.sqlock(&["--transaction-pooling", "release", "--force", &key]);
    assert_eq!(
        released.status.code(),
        Some(0),
        "release: {}",
        stderr(&released)
    );
    let code = common::wait_exit(&mut holder, Duration::from_secs(30));
    assert_eq!(
        code,
        76,
        "the holder learns it lost the lock: {}",
        b.log("holder")
    );

    let swept = b.sqlock(&["--transaction-pooling", "sweep"]);
    assert!(swept.status.success(), "sweep: {}", stderr(&swept));
}

#[test]
fn without_the_setting_the_error_says_what_to_set() {
    let Some(b) = pgbouncer("cli_pgbouncer_plain") else {
        return;
    };
    // Each run leaves its named statements on the server connection it was lent, and
    // the next client given that connection meets them: PgBouncer hands out the one
    // used last. Whatever happens, the answer is success or 69 with a hint, never 70.
    // Each run takes a key of its own: a run stopped by the driver error after its
    // grant leaves its lease to expire, and the next run must not meet it.
    let mut told = 0;
    for i in 0..5 {
        let key = common::key(&format!("plain-{i}"));
        let o = b.sqlock(&["run", "--no-wait", &key, "--", "true"]);
        match o.status.code() {
            Some(0) => {}
            Some(69) => {
                assert!(
                    stderr(&o).contains("--transaction-pooling")
                        && stderr(&o).contains("SQLOCK_TRANSACTION_POOLING=1"),
                    "{}",
                    stderr(&o)
                );
                told += 1;
            }
            other => panic!("exit {other:?}: {}", stderr(&o)),
        }
    }
    assert!(told > 0, "no run met a statement another client left");
}

/// Two `sqlock run`s through PgBouncer exclude each other, whichever server
/// connections PgBouncer lends them: while one holds the key the other is refused
/// (exit 75), and once the first has ended the second gets it, with a higher token.
#[test]
fn two_runs_through_pgbouncer_exclude_each_other() {
    let Some(b) = pgbouncer("cli_pgbouncer_excl") else {
        return;
    };
    for strategy in ["lease", "insert", "for-update"] {
        let key = common::key(&format!("excl-{strategy}"));
        let token_file = b.path(&format!("{strategy}.token"));
        let release = b.path(&format!("{strategy}.release"));
        // The holder keeps the key until the test tells it to end.
        let script = format!(
            "echo $SQLOCK_FENCING_TOKEN > {t}; while [ ! -e {r} ]; do sleep 0.05; done",
            t = token_file.display(),
            r = release.display()
        );
        let log = format!("{strategy}-first");
        let mut first = b.spawn(
            &log,
            &[
                "--transaction-pooling",
                "run",
                "--strategy",
                strategy,
                &key,
                "--",
                "sh",
                "-c",
                &script,
            ],
        );
        let first_token: i64 = wait_for_line(&token_file, Duration::from_secs(20))
            .trim()
            .parse()
            .unwrap();
        let run_second = || {
            b.sqlock(&[
                "--transaction-pooling",
                "run",
                "--strategy",
                strategy,
                "--no-wait",
                &key,
                "--",
                "sh",
                "-c",
                "echo $SQLOCK_FENCING_TOKEN",
            ])
        };
        // Several tries, so that several server connections are lent to the second.
        for _ in 0..5 {
            let second = run_second();
            assert_eq!(
                second.status.code(),
                Some(75),
                "{strategy}: a second run got a held key: {}{}",
                stdout(&second),
                stderr(&second)
            );
        }
        std::fs::write(&release, "").unwrap();
        assert_eq!(
            common::wait_exit(&mut first, Duration::from_secs(30)),
            0,
            "{}",
            b.log(&log)
        );
        let second = run_second();
        assert_eq!(
            second.status.code(),
            Some(0),
            "{strategy}: {}",
            stderr(&second)
        );
        let second_token: i64 = stdout(&second).trim().parse().unwrap();
        assert!(
            second_token > first_token,
            "{strategy}: token {second_token} after {first_token}"
        );
    }
}
