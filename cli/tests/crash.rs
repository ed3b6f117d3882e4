//! Scenario 3: a holder killed with SIGKILL leaves no lock behind for longer than its
//! TTL, and the next process gets the key with a higher fencing token.
//!
//! Checked on the database's own clock rather than by timing processes: right after
//! the kill, the lease the dead holder left expires within its TTL (`list --json`
//! reads `expires_in_ms` from the server); a for-update lock, which ends with its
//! holder's connection, is not listed at all. Then another `sqlock run` takes the key,
//! and its token is above the dead holder's.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::{backends, in_parallel, key, signal, stderr, stdout, wait_for_line, Backend};

/// The dead holder's TTL.
const TTL_MS: u64 = 2_000;

/// A bound for what should take a TTL or less, so that a broken build fails rather
/// than hangs. Not a timing assertion.
const LIVENESS: Duration = Duration::from_secs(20);

/// The lock on `k` as `list --json` reports it, if it is listed.
fn listed(b: &Backend, k: &str) -> Option<serde_json::Value> {
    let o = b.sqlock(&["list", "--json"]);
    assert!(o.status.success(), "{}: {}", b.name, stderr(&o));
    let all: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    all.as_array()?.iter().find(|l| l["key"] == k).cloned()
}

#[test]
fn a_killed_holder_frees_the_key_within_its_ttl() {
    let cases: Vec<(Backend, &str)> = backends("cli_crash")
        .into_iter()
        .flat_map(|b| b.strategies().into_iter().map(move |s| (b.clone(), s)))
        .collect();
    in_parallel(cases, |(b, strategy)| {
        let what = format!("{} {strategy}", b.name);
        let k = key(&format!("crash-{strategy}"));
        let token_file = b.path(&format!("{strategy}.token"));
        let script = format!(
            "echo $SQLOCK_FENCING_TOKEN > {}; exec sleep 30",
            token_file.display()
        );
        let ttl = format!("{TTL_MS}ms");
        let mut holder = b.spawn(
            &format!("{strategy}-holder"),
            &[
                "run",
                "--strategy",
                strategy,
                "--ttl",
                &ttl,
                &k,
                "--",
                "sh",
                "-c",
                &script,
            ],
        );
        let dead_token: i64 = wait_for_line(&token_file, LIVENESS).trim().parse().unwrap();
        // The sqlock process, not its command: nothing releases the lock.
        signal(holder.id(), "KILL");
        holder.wait().unwrap();

        if strategy == "for-update" {
            // A row lock in the holder's transaction: nothing a sweep or list sees.
            assert!(
                listed(&b, &k).is_none(),
                "{what}: a for-update lock is listed"
            );
        } else if let Some(lock) = listed(&b, &k) {
            // Renewed at most a TTL ago: it expires within the TTL, on the server's
            // clock. (It may have expired already on a slow machine: not listed.)
            let left = lock["expires_in_ms"].as_u64().unwrap();
            assert!(
                left <= TTL_MS,
                "{what}: the dead holder's lease has {left} ms left"
            );
            assert_eq!(lock["fencing_token"].as_i64(), Some(dead_token), "{what}");
        }

        // The next holder gets the key (once the lease lapsed, or at once for a
        // for-update lock) with a higher token.
        let next_file = b.path(&format!("{strategy}.next"));
        let note = format!("echo $SQLOCK_FENCING_TOKEN > {}", next_file.display());
        let started = Instant::now();
        loop {
            let next = b.sqlock(&[
                "run",
                "--strategy",
                strategy,
                "--no-wait",
                &k,
                "--",
                "sh",
                "-c",
                &note,
            ]);
            if next.status.success() {
                break;
            }
            assert_eq!(
                next.status.code(),
                Some(75),
                "{what}: {}{}",
                stderr(&next),
                stdout(&next)
            );
            assert!(
                started.elapsed() < LIVENESS,
                "{what}: the key was never freed"
            );
            thread::sleep(Duration::from_millis(50));
        }
        let next_token: i64 = wait_for_line(&next_file, LIVENESS).trim().parse().unwrap();
        assert!(
            next_token > dead_token,
            "{what}: token {next_token} after {dead_token}"
        );
        println!(
            "{what}: the key was taken again {:?} after the kill",
            started.elapsed()
        );
    });
}
