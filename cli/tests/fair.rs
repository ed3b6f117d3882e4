//! `sqlock run --fair`: processes queued on one key, each confirmed in the queue (by
//! `sqlock list`) before the next arrives, run in order of arrival, with rising
//! fencing tokens; `sqlock list` shows the waiters. On every backend.

mod common;

use std::fs;
use std::time::Duration;

use common::{backends, in_parallel, key, stderr, stdout, wait_exit, wait_for_line, Backend};

const WAITERS: usize = 3;

/// How many waiters `sqlock list --json` shows queued for `k`.
fn waiters(b: &Backend, k: &str) -> u64 {
    let o = b.sqlock(&["list", "--json"]);
    assert!(o.status.success(), "{}: {}", b.name, stderr(&o));
    let locks: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    locks
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["key"] == k)
        .map_or(0, |l| l["waiters"].as_u64().unwrap())
}

#[test]
fn fair_runs_go_in_order_of_arrival() {
    in_parallel(backends("cli_fair"), |b| {
        let k = key("fair");
        let held = b.path("held");
        let go = b.path("go");
        let log = b.path("order.log");
        let holder_script = format!(
            "echo held > {0}; while [ ! -e {1} ]; do sleep 0.02; done",
            held.display(),
            go.display()
        );
        let mut holder = b.spawn(
            "holder",
            &[
                "run",
                "--fair",
                "--ttl",
                "10s",
                &k,
                "--",
                "sh",
                "-c",
                &holder_script,
            ],
        );
        wait_for_line(&held, Duration::from_secs(30));
        let mut waiting = Vec::new();
        for i in 0..WAITERS {
            let script = format!("echo \"{i} $SQLOCK_FENCING_TOKEN\" >> {}", log.display());
            waiting.push(b.spawn(
                &format!("waiter-{i}"),
                &[
                    "run", "--fair", "--ttl", "10s", &k, "--", "sh", "-c", &script,
                ],
            ));
            // Arrived: in the queue before the next one starts.
            let started = std::time::Instant::now();
            while waiters(&b, &k) < (i + 1) as u64 {
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "{}: waiter {i} never queued: {}",
                    b.name,
                    b.log(&format!("waiter-{i}"))
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // `status` says how many wait, as text and as JSON.
        let status = b.sqlock(&["status", &k]);
        assert!(status.status.success(), "{}: {}", b.name, stderr(&status));
        assert!(
            stdout(&status)
                .lines()
                .any(|l| l.starts_with("fair waiters") && l.ends_with(&format!(" {WAITERS}"))),
            "{}: {}",
            b.name,
            stdout(&status)
        );
        let status = b.sqlock(&["status", "--json", &k]);
        let json: serde_json::Value = serde_json::from_str(&stdout(&status)).unwrap();
        assert_eq!(json["waiters"].as_u64(), Some(WAITERS as u64), "{}", b.name);
        fs::write(&go, "go").unwrap();
        assert_eq!(
            wait_exit(&mut holder, Duration::from_secs(30)),
            0,
            "{}",
            b.log("holder")
        );
        for (i, w) in waiting.iter_mut().enumerate() {
            let status = wait_exit(w, Duration::from_secs(60));
            assert_eq!(status, 0, "{}: {}", b.name, b.log(&format!("waiter-{i}")));
        }
        let text = fs::read_to_string(&log).unwrap();
        let runs: Vec<(usize, i64)> = text
            .lines()
            .map(|l| {
                let (i, t) = l.split_once(' ').unwrap();
                (i.parse().unwrap(), t.parse().unwrap())
            })
            .collect();
        let order: Vec<usize> = runs.iter().map(|r| r.0).collect();
        assert_eq!(
            order,
            (0..WAITERS).collect::<Vec<_>>(),
            "{}: {text}",
            b.name
        );
        assert!(
            runs.windows(2).all(|w| w[0].1 < w[1].1),
            "{}: {text}",
            b.name
        );
        assert_eq!(waiters(&b, &k), 0, "{}", b.name);
        println!("{}: {WAITERS} fair runs in order of arrival", b.name);
    });
}
