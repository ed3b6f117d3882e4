//! What a new user meets first: duration messages in the tool's own voice (negative,
//! too long, in the unit written), `list` and friends on a fresh directory creating no
//! database, a `--wait` that runs out printed as written, `--at-least` keeping sqlock
//! running until SIGTERM releases at once, `--json` on every command with output, and
//! README's exit codes and units matching `--help`.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::{
    alive, backends, in_parallel, key, scratch_dir, signal, stderr, stdout, wait_exit,
    wait_for_line, Backend, BIN,
};

/// `sqlock ARGS...` in `dir`, on a SQLite file of the test's own there (`sqlock.db`),
/// as a user's first steps would be on the default one.
fn sqlock_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .current_dir(dir)
        .args(args)
        .env_remove("DATABASE_URL")
        .env(
            "SQLOCK_DATABASE_URL",
            format!("sqlite:{}", dir.join("sqlock.db").display()),
        )
        .output()
        .expect("sqlock runs")
}

#[test]
fn durations_are_refused_in_the_tools_own_words() {
    let dir = scratch_dir("first_durations");
    // (arguments, what stderr says)
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "--ttl", "-5s", "k", "--", "true"],
            "cannot be negative",
        ),
        (
            &["run", "--wait", "-1s", "k", "--", "true"],
            "cannot be negative",
        ),
        (
            &["run", "--at-least", "-1m", "k", "--", "true"],
            "cannot be negative",
        ),
        (&["sweep", "--grace", "-1h"], "cannot be negative"),
        (&["sweep", "--batch", "-1"], "-1 is not in 1..=100000"),
        (&["sweep", "--every", "-10s"], "cannot be negative"),
        (
            &["run", "--ttl", "99999999999999999999s", "k", "--", "true"],
            "is too long: the maximum is 315360000s (3650d)",
        ),
        (
            &["run", "--ttl", "4000d", "k", "--", "true"],
            "is too long: the maximum is 3650d",
        ),
        (
            &["run", "--wait", "1000000h", "k", "--", "true"],
            "is too long: the maximum is 87600h (3650d)",
        ),
        (
            &["sweep", "--grace", "18446744073709551615ms"],
            "is too long: the maximum is 315360000000ms (3650d)",
        ),
        (
            &["run", "--ttl", "5ms", "k", "--", "true"],
            "ttl of 5ms is too short: the minimum is 1000ms (1s), since the lease is renewed",
        ),
        (
            &["run", "--ttl", "10ms", "k", "--", "true"],
            "ttl of 10ms is too short: the minimum is 1000ms",
        ),
        (
            &["elect", "--ttl", "999ms", "n", "--", "true"],
            "ttl of 999ms is too short: the minimum is 1000ms",
        ),
        (
            &["run", "--ttl", "0s", "k", "--", "true"],
            "ttl of 0s is too short: the minimum is 1s",
        ),
    ];
    for (args, says) in cases {
        let o = sqlock_in(&dir, args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {err}");
        assert!(err.starts_with("sqlock: "), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(
            !err.contains("tip:") && !err.contains("-- -"),
            "{args:?}: {err}"
        );
        if says.contains("too long") {
            assert!(!err.contains("invalid"), "{args:?}: {err}");
        }
    }
    assert!(
        !dir.join("sqlock.db").exists(),
        "bad input created a database"
    );
    // The longest accepted: ten years, in any unit.
    let o = sqlock_in(&dir, &["run", "--ttl", "87600h", "k", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn reading_a_fresh_directory_creates_no_database() {
    let dir = scratch_dir("first_fresh");
    let db = dir.join("sqlock.db");
    let o = sqlock_in(&dir, &["list"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), "no locks held");
    assert!(
        stderr(&o).contains(&format!("no database at {}", db.display())),
        "{}",
        stderr(&o)
    );
    let o = sqlock_in(&dir, &["list", "--json"]);
    assert_eq!(stdout(&o).trim(), "[]", "{}", stderr(&o));
    let o = sqlock_in(&dir, &["status", "job"]);
    assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
    assert!(stdout(&o).contains("free"), "{}", stdout(&o));
    let o = sqlock_in(&dir, &["release", "--force", "job"]);
    assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
    let o = sqlock_in(&dir, &["sweep"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), "reclaimed 0 rows");
    assert!(!db.exists(), "a read created {}", db.display());
    let files: Vec<_> = fs::read_dir(&dir).unwrap().collect();
    assert!(files.is_empty(), "files left behind: {files:?}");

    // What takes a lock creates it, and then the readers see the file's table.
    let o = sqlock_in(&dir, &["run", "job", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(db.exists());
    let o = sqlock_in(&dir, &["list"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
}

/// Whether `text` holds a fractional number of (milli)seconds, as Rust's `Debug` of a
/// `Duration` prints it (`501.024989ms`, `1.5s`).
fn has_fractional_duration(text: &str) -> bool {
    let b = text.as_bytes();
    (1..b.len().saturating_sub(1)).any(|i| {
        b[i] == b'.' && b[i - 1].is_ascii_digit() && b[i + 1].is_ascii_digit() && {
            let rest = &text[i + 1..];
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            rest[digits..].starts_with('s') || rest[digits..].starts_with("ms")
        }
    })
}

/// Starts a holder of `k` whose command waits for the file `go`; returns once it holds.
fn hold_until_go(b: &Backend, k: &str, extra: &[&str]) -> (std::process::Child, String) {
    let ready = b.path(&format!("{k}.ready"));
    let go = b.path(&format!("{k}.go"));
    let script = format!(
        "echo $$ > {}; while [ ! -e {} ]; do sleep 0.05; done",
        ready.display(),
        go.display()
    );
    let log = format!("{k}-holder");
    let mut args = vec!["run"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[k, "--", "sh", "-c", &script]);
    let holder = b.spawn(&log, &args);
    wait_for_line(&ready, Duration::from_secs(15));
    (holder, log)
}

#[test]
fn a_wait_that_runs_out_is_printed_as_written() {
    in_parallel(backends("cli_first_wait"), |b| {
        let k = key("wait-out");
        let (mut holder, log) = hold_until_go(&b, &k, &[]);
        let o = b.sqlock(&["run", "--wait", "300ms", &k, "--", "true"]);
        assert_eq!(o.status.code(), Some(75), "{}: {}", b.name, stderr(&o));
        let err = stderr(&o);
        assert!(err.contains("--wait 300ms ran out"), "{}: {err}", b.name);
        assert!(!has_fractional_duration(&err), "{}: {err}", b.name);
        fs::write(b.path(&format!("{k}.go")), "").unwrap();
        assert_eq!(
            wait_exit(&mut holder, Duration::from_secs(15)),
            0,
            "{}",
            b.log(&log)
        );
    });
    assert!(has_fractional_duration("after 501.024989ms waiting"));
    assert!(has_fractional_duration("took 1.5s"));
    assert!(!has_fractional_duration("after 501ms, version 1.2.3"));
}

#[test]
fn at_least_keeps_sqlock_running_and_sigterm_releases_at_once() {
    in_parallel(backends("cli_first_at_least"), |b| {
        let k = key("at-least-term");
        let pid_file = b.path("at-least.pid");
        let script = format!("echo $$ > {}; exit 3", pid_file.display());
        let log = "at-least-holder";
        // The TTL is far longer than the test: a lock that was not released stays held.
        let mut holder = b.spawn(
            log,
            &[
                "run",
                "--ttl",
                "5m",
                "--at-least",
                "10m",
                &k,
                "--",
                "sh",
                "-c",
                &script,
            ],
        );
        let command: u32 = wait_for_line(&pid_file, Duration::from_secs(15))
            .trim()
            .parse()
            .unwrap();
        // The command is over (reaped by sqlock); sqlock stays, holding the lock.
        let started = std::time::Instant::now();
        while alive(command) {
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "{}: not reaped",
                b.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let o = b.sqlock(&["status", &k]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}: not held: {}",
            b.name,
            stdout(&o)
        );
        assert!(
            holder.try_wait().unwrap().is_none(),
            "{}: sqlock left before --at-least: {}",
            b.name,
            b.log(log)
        );
        signal(holder.id(), "TERM");
        assert_eq!(
            wait_exit(&mut holder, Duration::from_secs(15)),
            3,
            "{}: the command's status: {}",
            b.name,
            b.log(log)
        );
        // Released, not left to lapse (the lease had minutes left).
        let o = b.sqlock(&["status", &k]);
        assert_eq!(
            o.status.code(),
            Some(75),
            "{}: still held: {}",
            b.name,
            stdout(&o)
        );

        // A signal while the command still runs ends the period too: passed on to the
        // command, and once it is over the lock is released and sqlock exits.
        let k = key("at-least-early");
        let ready = b.path("at-least-early.ready");
        let script = format!(
            "trap 'exit 4' TERM; echo ready > {}; sleep 30 & wait",
            ready.display()
        );
        let log = "at-least-early-holder";
        let mut holder = b.spawn(
            log,
            &[
                "run",
                "--ttl",
                "5m",
                "--at-least",
                "10m",
                &k,
                "--",
                "sh",
                "-c",
                &script,
            ],
        );
        wait_for_line(&ready, Duration::from_secs(15));
        signal(holder.id(), "TERM");
        assert_eq!(
            wait_exit(&mut holder, Duration::from_secs(15)),
            4,
            "{}: the command's status: {}",
            b.name,
            b.log(log)
        );
        let o = b.sqlock(&["status", &k]);
        assert_eq!(
            o.status.code(),
            Some(75),
            "{}: still held: {}",
            b.name,
            stdout(&o)
        );
    });
}

/// Parses every line of `o`'s stdout as JSON.
fn json_lines(what: &str, o: &Output) -> Vec<serde_json::Value> {
    let text = stdout(o);
    assert!(!text.trim().is_empty(), "{what}: no output: {}", stderr(o));
    text.lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {l}: {}", stderr(o)))
        })
        .collect()
}

#[test]
fn every_command_with_output_speaks_json() {
    in_parallel(backends("cli_first_json"), |b| {
        let what = |c: &str| format!("{} {c}", b.name);
        let o = b.sqlock(&["migrate", "--json"]);
        let j = &json_lines(&what("migrate"), &o)[0];
        assert_eq!(j["table"], b.table.as_str(), "{j}");
        assert_eq!(j["ready"], true, "{j}");

        let o = b.sqlock(&["schema", "--json"]);
        let j = &json_lines(&what("schema"), &o)[0];
        assert_eq!(j["table"], b.table.as_str(), "{j}");
        assert!(j["ddl"].as_str().unwrap().contains(&b.table), "{j}");
        assert!(j["dialect"].is_string(), "{j}");

        let o = b.sqlock(&["sweep", "--json"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(json_lines(&what("sweep"), &o)[0]["reclaimed"].is_u64());

        // --every: one object a line, each as it is swept.
        let mut sweeper = b
            .command(&["sweep", "--every", "100ms", "--json"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(sweeper.stdout.take().unwrap()).lines();
        for _ in 0..2 {
            let line = lines.next().expect("a line").unwrap();
            let j: serde_json::Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("{}: not JSON ({e}): {line}", what("sweep --every")));
            assert!(j["reclaimed"].is_u64(), "{j}");
        }
        signal(sweeper.id(), "TERM");
        assert_eq!(wait_exit(&mut sweeper, Duration::from_secs(15)), 0);

        let k = key("json-release");
        let (mut holder, log) = hold_until_go(&b, &k, &["--ttl", "20s"]);
        let held = &json_lines(&what("status"), &b.sqlock(&["status", "--json", &k]))[0];
        let o = b.sqlock(&["release", "--force", "--json", &k]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let j = &json_lines(&what("release"), &o)[0];
        assert_eq!(j["revoked"], true, "{j}");
        assert_eq!(j["released"], false, "{j}");
        assert_eq!(j["mode"], "revoke", "{j}");
        assert_eq!(j["holds_revoked"], 1, "{j}");
        assert!(j["free_by"].is_string() && j["free_in_ms"].is_u64(), "{j}");
        assert_eq!(j["key"], k.as_str(), "{j}");
        assert_eq!(j["owner"], held["owner"], "{j} {held}");
        assert_eq!(j["fencing_token"], held["fencing_token"], "{j} {held}");
        assert_eq!(
            wait_exit(&mut holder, Duration::from_secs(15)),
            76,
            "{}",
            b.log(&log)
        );
        let o = b.sqlock(&["release", "--force", "--json", &k]);
        assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
        let j = &json_lines(&what("release again"), &o)[0];
        assert_eq!(j["revoked"], false, "{j}");
        assert_eq!(j["released"], false, "{j}");
        assert!(j["owner"].is_null() && j["free_by"].is_null(), "{j}");
        let o = b.sqlock(&["release", "--force", "--holder-gone", "--json", &k]);
        assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
        let j = &json_lines(&what("release --holder-gone"), &o)[0];
        assert_eq!(j["mode"], "holder-gone", "{j}");
        assert_eq!(j["released"], false, "{j}");
    });
}

/// The codes of an exit-status list: the first number on each line that starts with
/// one (after `|` in a Markdown table).
fn codes(lines: impl Iterator<Item = String>) -> BTreeSet<u32> {
    lines
        .filter_map(|l| {
            let l = l.trim_start().trim_start_matches('|').trim_start();
            let digits: String = l.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

#[test]
fn readme_says_what_help_says() {
    let help = stdout(&Command::new(BIN).arg("--help").output().unwrap());
    let from_help = codes(
        help.lines()
            .skip_while(|l| !l.starts_with("Exit status"))
            .take_while(|l| !l.trim().is_empty())
            .map(str::to_owned),
    );
    let readme = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
        .expect("README.md beside the workspace");
    let from_readme = codes(
        readme
            .lines()
            .skip_while(|l| !l.starts_with("| exit status"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(str::to_owned),
    );
    let constants = BTreeSet::from(
        [
            0,
            sqlock_cli::EXIT_USAGE,
            sqlock_cli::EXIT_UNAVAILABLE,
            sqlock_cli::EXIT_SOFTWARE,
            sqlock_cli::EXIT_NOT_ACQUIRED,
            sqlock_cli::EXIT_LOST,
            sqlock_cli::EXIT_ROW_LOCKED,
            sqlock_cli::EXIT_CANNOT_EXECUTE,
            sqlock_cli::EXIT_NOT_FOUND,
        ]
        .map(|c| u32::try_from(c).unwrap()),
    );
    assert_eq!(from_help, constants, "--help's exit codes: {help}");
    assert_eq!(from_readme, constants, "README's exit-status table");
    assert!(
        readme.contains("units `ms`, `s`, `m`, `h`, `d`") && help.contains("units ms, s, m, h, d"),
        "the duration units, `d` included"
    );
    assert!(
        readme.contains("cargo install --locked --path cli"),
        "README says how to install"
    );
    for cmd in ["status [--json] KEY", "sqlock completions", "sqlock man"] {
        assert!(readme.contains(cmd), "README does not mention {cmd}");
    }
}

#[test]
fn failures_under_json_are_json_too() {
    let dir = scratch_dir("first_json_failures");
    let cases: &[(&[&str], i32)] = &[
        // Refused while parsing.
        (&["status", "--json", "--ttl", "1s", "k"], 64),
        (&["release", "--force", "--json", ""], 64),
        // Refused by the database.
        (
            &[
                "list",
                "--json",
                "--database-url",
                "postgres://127.0.0.1:1/none",
            ],
            69,
        ),
    ];
    for (args, status) in cases {
        let o = sqlock_in(&dir, args);
        assert_eq!(o.status.code(), Some(*status), "{args:?}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(stdout(&o).trim())
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {:?}", stdout(&o)));
        assert_eq!(v["exit_status"], *status, "{args:?}: {v}");
        let message = v["error"].as_str().unwrap_or_default();
        assert!(!message.is_empty(), "{args:?}: {v}");
        assert!(stderr(&o).contains(message), "{args:?}: {}", stderr(&o));
    }
    // Without --json, stdout stays empty; and --json after `--` is the command's.
    let o = sqlock_in(&dir, &["status", "--ttl", "1s", "k"]);
    assert_eq!(o.status.code(), Some(64));
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    let o = sqlock_in(&dir, &["run", "k", "--", "sh", "-c", "exit 3", "--json"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
}
