//! Scenario 4: a holder paused past its TTL is overtaken by another process with a
//! larger fencing token; resumed, it stops its command and exits 76.

mod common;

use std::fs;
use std::thread;
use std::time::Duration;

use common::{
    alive, backends, in_parallel, key, signal, stderr, wait_exit, wait_for_line, Backend, LEASED,
};

/// Only leased strategies: a for-update lock lives as long as its connection, which a
/// paused process keeps open.
#[test]
fn a_paused_holder_is_overtaken_and_exits_76() {
    let cases: Vec<(Backend, &str)> = backends("cli_pause")
        .into_iter()
        .flat_map(|b| LEASED.iter().map(move |s| (b.clone(), *s)))
        .collect();
    in_parallel(cases, |(b, strategy)| {
        let what = format!("{} {strategy}", b.name);
        let k = key(&format!("pause-{strategy}"));
        let first = b.path(&format!("{strategy}-1"));
        let second = b.path(&format!("{strategy}-2"));
        let script = format!(
            "echo \"$$ $SQLOCK_FENCING_TOKEN\" > {}; exec sleep 30",
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
                "1s",
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

        signal(holder.id(), "STOP");
        thread::sleep(Duration::from_millis(2_500));
        let script = format!("echo $SQLOCK_FENCING_TOKEN > {}", second.display());
        let next = b.sqlock(&[
            "run",
            "--strategy",
            strategy,
            "--wait",
            "10s",
            &k,
            "--",
            "sh",
            "-c",
            &script,
        ]);
        assert!(next.status.success(), "{what}: {}", stderr(&next));
        let t2: i64 = fs::read_to_string(&second).unwrap().trim().parse().unwrap();
        assert!(t2 > t1, "{what}: token {t2} after {t1}");

        signal(holder.id(), "CONT");
        assert_eq!(
            wait_exit(&mut holder, Duration::from_secs(15)),
            76,
            "{what}: {}",
            b.log(&log)
        );
        assert!(!alive(child), "{what}: the command was not stopped");
        assert!(b.log(&log).contains("lost"), "{what}: {}", b.log(&log));
    });
}
