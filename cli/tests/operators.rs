//! Scenario 5, the operator's commands: `list` shows held locks and not released
//! ones, `release --force` revokes the lock and makes the holder exit 76 (giving it
//! back: then nothing is held), `sweep` reclaims the rows of
//! killed holders and reports how many, and `sweep --every` runs until signalled.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::{
    alive, backends, in_parallel, key, kill_orphan, signal, stderr, stdout, wait_exit,
    wait_for_line, Backend, LEASED,
};

/// The keys `list --json` reports.
fn listed(b: &Backend) -> Vec<serde_json::Value> {
    let o = b.sqlock(&["list", "--json"]);
    assert!(o.status.success(), "{}: {}", b.name, stderr(&o));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{}: list --json is not JSON ({e}): {}", b.name, stdout(&o)));
    json.as_array().expect("an array").clone()
}

fn keys(locks: &[serde_json::Value]) -> Vec<&str> {
    locks.iter().map(|l| l["key"].as_str().unwrap()).collect()
}

/// Starts a holder of `k` whose command writes its pid and sleeps, and waits until it
/// holds.
fn hold(b: &Backend, strategy: &str, ttl: &str, k: &str) -> (std::process::Child, u32, String) {
    hold_running(b, strategy, ttl, k, "", "exec sleep 30")
}

/// As [`hold`], with the command's shell `setup` run before it writes its pid and
/// `body` after.
fn hold_running(
    b: &Backend,
    strategy: &str,
    ttl: &str,
    k: &str,
    setup: &str,
    body: &str,
) -> (std::process::Child, u32, String) {
    let pid_file = b.path(&format!("{k}.pid"));
    let script = format!("{setup} echo $$ > {}; {body}", pid_file.display());
    let log = format!("{k}-holder");
    let holder = b.spawn(
        &log,
        &[
            "run",
            "--strategy",
            strategy,
            "--ttl",
            ttl,
            k,
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    let pid = wait_for_line(&pid_file, Duration::from_secs(10))
        .trim()
        .parse()
        .unwrap();
    (holder, pid, log)
}

#[test]
fn list_and_release_force() {
    let cases: Vec<(Backend, &str)> = backends("cli_release")
        .into_iter()
        .flat_map(|b| LEASED.iter().map(move |s| (b.clone(), *s)))
        .collect();
    in_parallel(cases, |(b, strategy)| {
        let what = format!("{} {strategy}", b.name);
        let held = key(&format!("held-{strategy}"));
        let released = key(&format!("released-{strategy}"));
        let ran = b.sqlock(&["run", "--strategy", strategy, &released, "--", "true"]);
        assert!(ran.status.success(), "{what}: {}", stderr(&ran));
        let (mut holder, child, log) = hold(&b, strategy, "15s", &held);

        let locks = listed(&b);
        assert!(keys(&locks).contains(&held.as_str()), "{what}: {locks:?}");
        assert!(
            !keys(&locks).contains(&released.as_str()),
            "{what}: released one listed"
        );
        let mine = locks.iter().find(|l| l["key"] == held.as_str()).unwrap();
        assert_eq!(mine["strategy"], strategy, "{what}");
        assert!(mine["fencing_token"].as_i64().unwrap() > 0, "{what}");
        assert!(
            mine["held_since"].is_string() && mine["expires_in_ms"].is_u64(),
            "{what}"
        );
        let owner = mine["owner"].as_str().unwrap().to_owned();
        let table = b.sqlock(&["list"]);
        assert!(table.status.success(), "{what}: {}", stderr(&table));
        assert!(stdout(&table).contains(&held), "{what}: {}", stdout(&table));
        assert!(
            !stdout(&table).contains(&released),
            "{what}: {}",
            stdout(&table)
        );

        let o = b.sqlock(&["release", "--force", &held]);
        let forced = Instant::now();
        assert_eq!(o.status.code(), Some(0), "{what}: {}", stderr(&o));
        assert!(
            stdout(&o).contains("revoked") && stdout(&o).contains(&owner),
            "{what}: {}",
            stdout(&o)
        );
        // Within one renewal period (a third of the 15 s TTL), and the command stopped
        // (it ends on SIGTERM), the lock given back. The bound is the contract's, with
        // slack for a loaded machine: a holder that only noticed when its lease lapsed
        // would take 10 s or more (its last renewal at most 5 s before the release).
        assert_eq!(
            wait_exit(&mut holder, Duration::from_secs(30)),
            76,
            "{what}: {}",
            b.log(&log)
        );
        let took = forced.elapsed();
        assert!(
            took < Duration::from_secs(8),
            "{what}: the holder exited {took:?} after the force release, more than one \
             renewal period (5 s) and slack"
        );
        assert!(!alive(child), "{what}: the command was not stopped");

        // Nothing held: said so, exit 75.
        for k in [held.as_str(), "never-held"] {
            let o = b.sqlock(&["release", "--force", k]);
            assert_eq!(o.status.code(), Some(75), "{what} {k}: {}", stderr(&o));
            assert!(stderr(&o).contains("not held"), "{what}: {}", stderr(&o));
        }
        assert!(!keys(&listed(&b)).contains(&held.as_str()), "{what}");
    });
}

/// A command that ignores SIGTERM is killed after the grace when the lock is lost,
/// and sqlock still exits 76.
#[test]
fn a_command_deaf_to_sigterm_is_killed_after_the_grace() {
    in_parallel(backends("cli_deaf"), |b| {
        let k = key("deaf");
        let (mut holder, child, log) = hold_running(
            &b,
            "lease",
            "3s",
            &k,
            "trap '' TERM;",
            "while :; do sleep 0.1; done",
        );
        let o = b.sqlock(&["release", "--force", &k]);
        assert_eq!(o.status.code(), Some(0), "{}: {}", b.name, stderr(&o));
        assert_eq!(
            wait_exit(&mut holder, Duration::from_secs(15)),
            76,
            "{}: {}",
            b.name,
            b.log(&log)
        );
        assert!(
            !alive(child),
            "{}: the command that ignored SIGTERM is still running",
            b.name
        );
    });
}

#[test]
fn sweep_reclaims_the_rows_of_killed_holders() {
    in_parallel(backends("cli_sweep"), |b| {
        let mut dead = Vec::new();
        for strategy in LEASED {
            let k = key(&format!("dead-{strategy}"));
            let (mut holder, child, _) = hold(&b, strategy, "1s", &k);
            signal(holder.id(), "KILL");
            holder.wait().unwrap();
            kill_orphan(child);
            dead.push(k);
        }
        // Past the TTL: the rows are expired, and nobody released them.
        thread::sleep(Duration::from_millis(1_500));
        let o = b.sqlock(&["sweep"]);
        assert!(o.status.success(), "{}: {}", b.name, stderr(&o));
        let count = |o: &std::process::Output| -> u64 {
            let text = stdout(o);
            text.strip_prefix("reclaimed ")
                .and_then(|t| t.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{}: {text:?}", b.name))
        };
        assert_eq!(count(&o), 2, "{}: the two dead holders' rows", b.name);
        let again = b.sqlock(&["sweep"]);
        assert_eq!(count(&again), 0, "{}: nothing left", b.name);
        let locks = listed(&b);
        for k in &dead {
            assert!(
                !keys(&locks).contains(&k.as_str()),
                "{}: {k} listed",
                b.name
            );
        }
    });
}

#[test]
fn sweep_every_runs_until_signalled() {
    in_parallel(backends("cli_sweep_every"), |b| {
        for sig in ["TERM", "INT"] {
            let sweeper = b
                .command(&["sweep", "--every", "200ms"])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let mut sweeper = sweeper;
            let started = Instant::now();
            // The signal goes once two sweeps have printed: the second comes after the
            // handlers are set, however slowly the command started.
            let out = sweeper.stdout.take().expect("piped");
            let (tx, rx) = std::sync::mpsc::channel();
            let reader = thread::spawn(move || {
                for line in std::io::BufRead::lines(std::io::BufReader::new(out)) {
                    let Ok(line) = line else { break };
                    if tx.send(line.clone()).is_err() {
                        break;
                    }
                }
            });
            let mut text = Vec::new();
            while text
                .iter()
                .filter(|l: &&String| l.contains("reclaimed"))
                .count()
                < 2
            {
                match rx.recv_timeout(Duration::from_secs(30)) {
                    Ok(line) => text.push(line),
                    Err(e) => panic!("{} {sig}: two sweeps not printed ({e}): {text:?}", b.name),
                }
            }
            signal(sweeper.id(), sig);
            assert_eq!(
                wait_exit(&mut sweeper, Duration::from_secs(10)),
                0,
                "{} {sig}",
                b.name
            );
            reader.join().unwrap();
            assert!(started.elapsed() < Duration::from_secs(40), "{}", b.name);
        }
    });
}
