//! SQLite's database clock is the clock of the host each process runs on: the lease
//! statements read `julianday('now')` in the process that runs them. A process whose
//! clock runs ahead by more than the TTL sees a held lease as lapsed and takes the key;
//! its fencing token is still the higher one, and the holder it deposed finds out at its
//! next renewal, stops its command and exits 76. Run here with libfaketime moving the
//! second process's clock (`scripts/fault-db.sh up` installs it).

mod common;

use std::fs;
use std::path::Path;
use std::time::Duration;

use common::{alive, backends, key, stderr, wait_exit, wait_for_line};

const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

#[test]
fn a_host_clock_ahead_by_more_than_the_ttl_takes_the_key_and_the_holder_exits_76() {
    assert!(
        Path::new(FAKETIME).exists(),
        "{FAKETIME} is missing: scripts/fault-db.sh up installs Debian's libfaketime"
    );
    let b = backends("cli_host_clock")
        .into_iter()
        .find(|b| b.name == "sqlite")
        .expect("SQLite is always there");
    for strategy in ["lease", "insert"] {
        let k = key(&format!("clock-{strategy}"));
        let first = b.path(&format!("{strategy}-1"));
        let second = b.path(&format!("{strategy}-2"));
        let script = format!(
            "echo \"$$ $SQLOCK_FENCING_TOKEN\" > {}; exec sleep 60",
            first.display()
        );
        let log = format!("{strategy}-holder");
        let mut holder = b.spawn(
            &log,
            &[
                "run",
                "--strategy",
                strategy,
                "--ttl",
                "30s",
                &k,
                "--",
                "sh",
                "-c",
                &script,
            ],
        );
        let line = wait_for_line(&first, Duration::from_secs(10));
        let (child, t1) = line.trim().split_once(' ').unwrap();
        let (child, t1): (u32, i64) = (child.parse().unwrap(), t1.parse().unwrap());

        // Two minutes ahead: the holder's 30 s lease has lapsed by this clock.
        let script = format!("echo $SQLOCK_FENCING_TOKEN > {}", second.display());
        let next = b
            .command(&[
                "run",
                "--strategy",
                strategy,
                "--wait",
                "5s",
                &k,
                "--",
                "sh",
                "-c",
                &script,
            ])
            .env("LD_PRELOAD", FAKETIME)
            .env("FAKETIME", "+120")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .output()
            .unwrap();
        assert!(next.status.success(), "{strategy}: {}", stderr(&next));
        let t2: i64 = fs::read_to_string(&second).unwrap().trim().parse().unwrap();
        assert!(t2 > t1, "{strategy}: token {t2} after {t1}");

        // Its next renewal (a third of the TTL at most) finds the lease gone.
        assert_eq!(
            wait_exit(&mut holder, Duration::from_secs(25)),
            76,
            "{strategy}: {}",
            b.log(&log)
        );
        assert!(!alive(child), "{strategy}: the command was not stopped");
        assert!(b.log(&log).contains("lost"), "{strategy}: {}", b.log(&log));
    }
}
