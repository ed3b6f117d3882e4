//! `sqlock run --shared` / `--exclusive`: the two sides of a read-write lock. Shared
//! runs overlap (each waits for the other to be in), an exclusive run is busy while
//! they hold, a waiting exclusive run makes later shared runs wait, and `sqlock list`
//! shows the lock with its holders. On every backend.

mod common;

use std::fs;
use std::time::{Duration, Instant};

use common::{backends, in_parallel, key, stderr, stdout, wait_exit, wait_for_line, Backend};

/// The items of `sqlock list --json` that belong to the read-write lock `k`, as
/// (side, owner).
fn sides(b: &Backend, k: &str) -> Vec<(String, String)> {
    let o = b.sqlock(&["list", "--json"]);
    assert!(o.status.success(), "{}: {}", b.name, stderr(&o));
    let locks: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    locks
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["rwlock"] == k)
        .map(|l| {
            (
                l["side"].as_str().unwrap().to_owned(),
                l["owner"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// A script that says it is in (`in`), then waits for `go`.
fn holding(b: &Backend, name: &str) -> (String, std::path::PathBuf, std::path::PathBuf) {
    let inside = b.path(&format!("{name}.in"));
    let go = b.path(&format!("{name}.go"));
    let script = format!(
        "echo \"$SQLOCK_KEY $SQLOCK_FENCING_TOKEN\" > {0}; while [ ! -e {1} ]; do sleep 0.02; done",
        inside.display(),
        go.display()
    );
    (script, inside, go)
}

#[test]
fn shared_runs_overlap_and_exclude_an_exclusive_run() {
    in_parallel(backends("cli_rw_shared"), |b| {
        let k = key("rw");
        let (s1, in1, go1) = holding(&b, "r1");
        let (s2, in2, go2) = holding(&b, "r2");
        let mut r1 = b.spawn("r1", &["run", "--shared", &k, "--", "sh", "-c", &s1]);
        let mut r2 = b.spawn("r2", &["run", "--shared", &k, "--", "sh", "-c", &s2]);
        // Both are in at once: the second shared run did not wait for the first.
        let line = wait_for_line(&in1, Duration::from_secs(30));
        assert!(line.starts_with(&format!("{k} ")), "{}: {line}", b.name);
        wait_for_line(&in2, Duration::from_secs(30));
        let read = sides(&b, &k);
        assert_eq!(read.len(), 2, "{}: {read:?}", b.name);
        assert!(read.iter().all(|(side, _)| side == "read"), "{read:?}");
        let text = b.sqlock(&["list"]);
        let text = stdout(&text);
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("{k}  writer -  readers 2 ("))),
            "{}: {text}",
            b.name
        );
        // An exclusive run is busy meanwhile.
        let busy = b.sqlock(&["run", "--exclusive", "--no-wait", &k, "--", "true"]);
        assert_eq!(
            busy.status.code(),
            Some(75),
            "{}: {}",
            b.name,
            stderr(&busy)
        );
        fs::write(&go1, "go").unwrap();
        fs::write(&go2, "go").unwrap();
        assert_eq!(
            wait_exit(&mut r1, Duration::from_secs(30)),
            0,
            "{}",
            b.log("r1")
        );
        assert_eq!(
            wait_exit(&mut r2, Duration::from_secs(30)),
            0,
            "{}",
            b.log("r2")
        );
        let free = b.sqlock(&["run", "--exclusive", "--no-wait", &k, "--", "true"]);
        assert_eq!(free.status.code(), Some(0), "{}: {}", b.name, stderr(&free));
        // Bad combinations and names are usage errors.
        let both = b.sqlock(&["run", "--shared", "--fair", &k, "--", "true"]);
        assert_eq!(both.status.code(), Some(64), "{}", b.name);
        let long = "n".repeat(213);
        let too_long = b.sqlock(&["run", "--shared", &long, "--", "true"]);
        assert_eq!(
            too_long.status.code(),
            Some(64),
            "{}: {}",
            b.name,
            stderr(&too_long)
        );
    });
}

/// A shared run holds; an exclusive run arrives and is confirmed waiting (`sqlock
/// list` shows its intent); a shared run that comes after it is busy although only a
/// reader holds; the exclusive run goes once the first shared run ends.
#[test]
fn a_waiting_exclusive_run_goes_before_later_shared_runs() {
    in_parallel(backends("cli_rw_pref"), |b| {
        let k = key("pref");
        let (s1, in1, go1) = holding(&b, "reader");
        let mut reader = b.spawn("reader", &["run", "--shared", &k, "--", "sh", "-c", &s1]);
        wait_for_line(&in1, Duration::from_secs(30));
        let done = b.path("writer.done");
        let script = format!("echo \"$SQLOCK_FENCING_TOKEN\" > {}", done.display());
        let mut writer = b.spawn(
            "writer",
            &["run", "--exclusive", &k, "--", "sh", "-c", &script],
        );
        let started = Instant::now();
        while !sides(&b, &k)
            .iter()
            .any(|(side, _)| side == "waiting-write")
        {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{}: the exclusive run never waited: {}",
                b.name,
                b.log("writer")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let late = b.sqlock(&["run", "--shared", "--no-wait", &k, "--", "true"]);
        assert_eq!(
            late.status.code(),
            Some(75),
            "{}: {}",
            b.name,
            stderr(&late)
        );
        assert!(!done.exists(), "{}: the writer ran with a reader", b.name);
        fs::write(&go1, "go").unwrap();
        assert_eq!(
            wait_exit(&mut reader, Duration::from_secs(30)),
            0,
            "{}",
            b.log("reader")
        );
        assert_eq!(
            wait_exit(&mut writer, Duration::from_secs(30)),
            0,
            "{}",
            b.log("writer")
        );
        wait_for_line(&done, Duration::from_secs(5));
        let after = b.sqlock(&["run", "--shared", "--no-wait", &k, "--", "true"]);
        assert_eq!(
            after.status.code(),
            Some(0),
            "{}: {}",
            b.name,
            stderr(&after)
        );
        println!(
            "{}: the exclusive run went before the later shared run",
            b.name
        );
    });
}

/// An exclusive run holding KEY alone shows as the write side of the read-write lock
/// KEY: `list --json` marks it (`rwlock`, side `write`, its owner), the text list
/// names it as the writer, and `status` says so, with `write` as its strategy. A plain
/// run of KEY is busy meanwhile, and shows as no side of any read-write lock.
#[test]
fn the_write_side_shows_as_such() {
    in_parallel(backends("cli_rw_shown"), |b| {
        let k = key("shown");
        let (script, inside, go) = holding(&b, "shown");
        let mut writer = b.spawn(
            "shown-writer",
            &["run", "--exclusive", &k, "--", "sh", "-c", &script],
        );
        wait_for_line(&inside, Duration::from_secs(30));
        let write = sides(&b, &k);
        assert_eq!(write.len(), 1, "{}: {write:?}", b.name);
        assert_eq!(write[0].0, "write", "{}: {write:?}", b.name);
        let owner = write[0].1.clone();
        assert!(!owner.is_empty(), "{}", b.name);
        let text = b.sqlock(&["list"]);
        let text = stdout(&text);
        assert!(
            text.lines()
                .any(|l| l == format!("{k}  writer {owner}  readers 0  waiting writers 0")),
            "{}: {text}",
            b.name
        );
        let status = b.sqlock(&["status", &k]);
        let status = stdout(&status);
        assert!(
            status.contains("held as the write side of a read-write lock")
                && status
                    .lines()
                    .any(|l| l.starts_with("strategy") && l.ends_with("write")),
            "{}: {status}",
            b.name
        );
        let busy = b.sqlock(&["run", "--no-wait", &k, "--", "true"]);
        assert_eq!(
            busy.status.code(),
            Some(75),
            "{}: {}",
            b.name,
            stderr(&busy)
        );
        fs::write(&go, "go").unwrap();
        assert_eq!(
            wait_exit(&mut writer, Duration::from_secs(30)),
            0,
            "{}",
            b.log("shown-writer")
        );
        // A plain run is no side of a read-write lock.
        let (script, inside, go) = holding(&b, "plain");
        let mut plain = b.spawn("plain", &["run", &k, "--", "sh", "-c", &script]);
        wait_for_line(&inside, Duration::from_secs(30));
        assert!(sides(&b, &k).is_empty(), "{}: {:?}", b.name, sides(&b, &k));
        fs::write(&go, "go").unwrap();
        assert_eq!(
            wait_exit(&mut plain, Duration::from_secs(30)),
            0,
            "{}",
            b.log("plain")
        );
    });
}

/// The run contract holds for both sides: a signal is passed on to the command and
/// its status returned, and the hold is given back; a signal while waiting gives up
/// the wait (128+N) and leaves nothing held.
#[test]
fn signals_are_passed_on_for_both_sides() {
    in_parallel(backends("cli_rw_signals"), |b| {
        for side in ["--shared", "--exclusive"] {
            let k = key(&format!("sig{side}"));
            let ready = b.path(&format!("{side}.ready"));
            let script = format!(
                "trap 'exit 3' TERM; echo ready > {}; sleep 30 & wait",
                ready.display()
            );
            let log = format!("{side}-holder");
            let mut holder = b.spawn(&log, &["run", side, &k, "--", "sh", "-c", &script]);
            wait_for_line(&ready, Duration::from_secs(30));
            common::signal(holder.id(), "TERM");
            let code = wait_exit(&mut holder, Duration::from_secs(30));
            assert_eq!(code, 3, "{} {side}: {}", b.name, b.log(&log));
            assert!(sides(&b, &k).is_empty(), "{} {side}: a hold stayed", b.name);
            let o = b.sqlock(&["run", "--exclusive", "--no-wait", &k, "--", "true"]);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{} {side}: {}",
                b.name,
                stderr(&o)
            );
        }
        // A shared run waiting behind an exclusive holder, interrupted: 130, and
        // nothing of it stays.
        let k = key("sigwait");
        let (script, inside, go) = holding(&b, "sigwait");
        let mut writer = b.spawn(
            "sigwait-writer",
            &["run", "--exclusive", &k, "--", "sh", "-c", &script],
        );
        wait_for_line(&inside, Duration::from_secs(30));
        let mut reader = b.spawn("sigwait-reader", &["run", "--shared", &k, "--", "true"]);
        // Its handlers are in (it waits, with signals watched), not a timed guess.
        let started = Instant::now();
        while !catches_sigint(reader.id()) {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{}: no handler",
                b.name
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        common::signal(reader.id(), "INT");
        assert_eq!(
            wait_exit(&mut reader, Duration::from_secs(30)),
            130,
            "{}",
            b.log("sigwait-reader")
        );
        fs::write(&go, "go").unwrap();
        assert_eq!(
            wait_exit(&mut writer, Duration::from_secs(30)),
            0,
            "{}",
            b.log("sigwait-writer")
        );
        assert!(sides(&b, &k).is_empty(), "{}: a hold stayed", b.name);
    });
}

/// Whether process `pid` catches SIGINT, by its caught-signals mask in /proc.
fn catches_sigint(pid: u32) -> bool {
    let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (2 - 1)) != 0)
}
