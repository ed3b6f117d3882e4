//! The rest of `sqlock run`'s contract: the command's environment and exit status,
//! SIGINT and SIGTERM passed on, `--at-least`, `--wait` running out, and commands
//! that cannot start.

mod common;

use std::fs;
use std::time::{Duration, Instant};

use common::{backends, in_parallel, key, signal, stderr, wait_exit, wait_for_line};

#[test]
fn the_command_gets_the_lock_and_gives_its_status() {
    in_parallel(backends("cli_run_env"), |b| {
        let k = key("env");
        let env_file = b.path("env");
        let script = format!(
            "echo \"$SQLOCK_KEY $SQLOCK_OWNER $SQLOCK_FENCING_TOKEN\" > {}; exit 7",
            env_file.display()
        );
        let o = b.sqlock(&["run", &k, "--", "sh", "-c", &script]);
        assert_eq!(o.status.code(), Some(7), "{}: {}", b.name, stderr(&o));
        let env = fs::read_to_string(&env_file).unwrap();
        let parts: Vec<&str> = env.split_whitespace().collect();
        assert_eq!(parts.len(), 3, "{}: {env}", b.name);
        assert_eq!(parts[0], k);
        assert_eq!(parts[1].len(), 36, "{}: an owner uuid: {env}", b.name);
        assert!(parts[2].parse::<i64>().unwrap() > 0, "{}: {env}", b.name);

        // A command ended by a signal: 128 + the signal.
        let o = b.sqlock(&["run", &key("sig"), "--", "sh", "-c", "kill -KILL $$"]);
        assert_eq!(o.status.code(), Some(128 + 9), "{}: {}", b.name, stderr(&o));

        // Commands that cannot start: as shells report them; the lock is given back.
        let k = key("cannot");
        let o = b.sqlock(&["run", &k, "--", "/nonexistent/command"]);
        assert_eq!(o.status.code(), Some(127), "{}: {}", b.name, stderr(&o));
        assert!(stderr(&o).starts_with("sqlock: "), "{}", stderr(&o));
        let o = b.sqlock(&["run", &k, "--", "/dev/null"]);
        assert_eq!(o.status.code(), Some(126), "{}: {}", b.name, stderr(&o));
        let o = b.sqlock(&["run", "--no-wait", &k, "--", "true"]);
        assert_eq!(o.status.code(), Some(0), "{}: {}", b.name, stderr(&o));
    });
}

#[test]
fn signals_are_passed_on_and_the_lock_released() {
    in_parallel(backends("cli_run_signals"), |b| {
        for (sig, status) in [("TERM", 3), ("INT", 4)] {
            let marker = b.path(&format!("{sig}.got"));
            let ready = b.path(&format!("{sig}.ready"));
            let script = format!(
                "trap 'echo got > {}; exit {status}' {sig}; echo ready > {}; sleep 30 & wait",
                marker.display(),
                ready.display()
            );
            let k = key(&format!("signal-{sig}"));
            let log = format!("{sig}-holder");
            let mut holder = b.spawn(&log, &["run", &k, "--", "sh", "-c", &script]);
            wait_for_line(&ready, Duration::from_secs(10));
            signal(holder.id(), sig);
            let code = wait_exit(&mut holder, Duration::from_secs(10));
            assert_eq!(code, status, "{} {sig}: {}", b.name, b.log(&log));
            assert_eq!(fs::read_to_string(&marker).unwrap().trim(), "got");
            let o = b.sqlock(&["run", "--no-wait", &k, "--", "true"]);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{} {sig}: not released: {}",
                b.name,
                stderr(&o)
            );
        }
    });
}

#[test]
fn at_least_and_wait() {
    in_parallel(backends("cli_run_wait"), |b| {
        // --at-least keeps the key after a command that ended at once.
        let k = key("atleast");
        let log = "atleast-holder";
        let mut holder = b.spawn(log, &["run", "--at-least", "3s", &k, "--", "true"]);
        let started = Instant::now();
        // Taken once the busy probe is refused; the first probes may come too early.
        let probe = loop {
            let o = b.sqlock(&["run", "--no-wait", &k, "--", "true"]);
            if o.status.code() != Some(0) || started.elapsed() > Duration::from_secs(10) {
                break o;
            }
        };
        assert_eq!(
            probe.status.code(),
            Some(75),
            "{}: within --at-least",
            b.name
        );
        // --wait runs out while the key is still kept: 75 after about that long.
        let waited = Instant::now();
        let o = b.sqlock(&["run", "--wait", "500ms", &k, "--", "true"]);
        assert_eq!(o.status.code(), Some(75), "{}: {}", b.name, stderr(&o));
        assert!(waited.elapsed() >= Duration::from_millis(500), "{}", b.name);
        let o = b.sqlock(&["run", "--wait", "0s", &k, "--", "true"]);
        assert_eq!(o.status.code(), Some(75), "{}: {}", b.name, stderr(&o));
        assert_eq!(
            wait_exit(&mut holder, Duration::from_secs(10)),
            0,
            "{}: {}",
            b.name,
            b.log(log)
        );
        assert!(started.elapsed() >= Duration::from_secs(3), "{}", b.name);
        // Released at the end of the window: a waiter gets it.
        let o = b.sqlock(&["run", "--wait", "5s", &k, "--", "true"]);
        assert_eq!(o.status.code(), Some(0), "{}: {}", b.name, stderr(&o));
    });
}
