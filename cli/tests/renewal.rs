//! Scenario 2: `--no-wait` exits 75 while another process holds the key, and a holder
//! whose command outlives its TTL keeps the key all along because it is renewed.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::{backends, in_parallel, key, stderr, wait_exit, wait_for_line, Backend};

/// A holder with a 2 s TTL runs a 7 s command; attempts at ~3 s and ~6 s (past one
/// and two TTLs) are refused, and the key is free right after the holder ends.
#[test]
fn no_wait_is_refused_while_a_renewed_holder_runs() {
    let cases: Vec<(Backend, &str)> = backends("cli_renewal")
        .into_iter()
        .flat_map(|b| b.strategies().into_iter().map(move |s| (b.clone(), s)))
        .collect();
    in_parallel(cases, |(b, strategy)| {
        let what = format!("{} {strategy}", b.name);
        let k = key(&format!("renewal-{strategy}"));
        let ready = b.path(&format!("{strategy}.ready"));
        let done = b.path(&format!("{strategy}.done"));
        // Held until the probes are over (a minute at most): a fixed sleep would have
        // to outlast the probes' own start on a busy machine.
        let script = format!(
            "echo held > {}; i=0; while [ ! -e {} ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done",
            ready.display(),
            done.display()
        );
        let log = format!("{strategy}-holder");
        let mut holder = b.spawn(
            &log,
            &[
                "run",
                "--strategy",
                strategy,
                "--ttl",
                "2s",
                &k,
                "--",
                "sh",
                "-c",
                &script,
            ],
        );
        wait_for_line(&ready, Duration::from_secs(10));
        let held = Instant::now();
        for at in [3, 6] {
            thread::sleep(Duration::from_secs(at).saturating_sub(held.elapsed()));
            let probe = b.sqlock(&["run", "--strategy", strategy, "--no-wait", &k, "--", "true"]);
            assert_eq!(
                probe.status.code(),
                Some(75),
                "{what} at ~{at}s: {}",
                stderr(&probe)
            );
            assert!(
                stderr(&probe).starts_with("sqlock: "),
                "{what}: {}",
                stderr(&probe)
            );
        }
        std::fs::write(&done, "done").expect("the done mark");
        assert_eq!(
            wait_exit(&mut holder, Duration::from_secs(20)),
            0,
            "{what}: {}",
            b.log(&log)
        );
        let after = b.sqlock(&["run", "--strategy", strategy, "--no-wait", &k, "--", "true"]);
        assert_eq!(after.status.code(), Some(0), "{what}: {}", stderr(&after));
    });
}
