//! Scenario 1: eight processes running `sqlock run` on one key never hold it at once,
//! and the fencing tokens they are given only rise, on every backend and strategy.

mod common;

use std::fs;
use std::thread;

use common::{backends, in_parallel, key, stderr, Backend};

const PROCESSES: usize = 8;
const RUNS_EACH: usize = 4;

/// Each child appends a start and an end mark with its token to one file. Appends
/// with `>>` land in the order they happen, so without overlap every start is
/// followed by its own end before the next start, and tokens rise line after line.
///
/// The backends run side by side, and each backend's strategies one after another:
/// eight `sqlock run` at once hold up to six connections each (a pool of four and two
/// for presence), so three strategies at once on one server could pass PostgreSQL's
/// default of 100 connections.
#[test]
fn eight_processes_never_overlap_and_tokens_rise() {
    in_parallel(backends("cli_overlap"), |b| {
        for strategy in b.strategies() {
            one_strategy(&b, strategy);
        }
    });
}

fn one_strategy(b: &Backend, strategy: &'static str) {
    let k = key(&format!("overlap-{strategy}"));
    let log = b.path(&format!("{strategy}.log"));
    // The sleep widens the window an overlap would show in.
    let script = format!(
        "echo \"start $SQLOCK_FENCING_TOKEN\" >> {0}; sleep 0.05; \
             echo \"end $SQLOCK_FENCING_TOKEN\" >> {0}",
        log.display()
    );
    let workers: Vec<_> = (0..PROCESSES)
        .map(|_| {
            let (b, k, script) = (b.clone(), k.clone(), script.clone());
            thread::spawn(move || {
                for _ in 0..RUNS_EACH {
                    let o = b.sqlock(&[
                        "run",
                        "--strategy",
                        strategy,
                        "--ttl",
                        "10s",
                        &k,
                        "--",
                        "sh",
                        "-c",
                        &script,
                    ]);
                    assert!(o.status.success(), "{} {strategy}: {}", b.name, stderr(&o));
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }

    let text = fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let what = format!("{} {strategy}", b.name);
    assert_eq!(lines.len(), 2 * PROCESSES * RUNS_EACH, "{what}: {text}");
    let mut last = 0i64;
    for (i, pair) in lines.chunks(2).enumerate() {
        let token = |line: &str, mark: &str| -> i64 {
            line.strip_prefix(mark)
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("{what}: line {}: {line:?}, not {mark:?}", 2 * i))
        };
        let start = token(pair[0], "start ");
        let end = token(pair[1], "end ");
        assert_eq!(
            start,
            end,
            "{what}: overlapping holds at line {}: {pair:?}",
            2 * i
        );
        assert!(start > last, "{what}: token {start} after {last}");
        last = start;
    }
    println!(
        "{what}: {} runs by {PROCESSES} processes, no overlap, tokens rising",
        PROCESSES * RUNS_EACH
    );
}
