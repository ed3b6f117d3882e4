//! Presence, the default of `sqlock run` where it is safe: a SIGKILLed `sqlock run`
//! leaves its 60 s lease to the next `sqlock run` at once, not at its expiry. Checked
//! on the database's clock: the next holder's grant (`held_since` in `list --json`,
//! which its command runs) comes before the dead holder's lease would have expired, and
//! its token is higher. With --no-presence (or SQLOCK_NO_PRESENCE=1) the key stays
//! taken. The time from the kill to the next command's start, start-up included, is
//! printed. `status` tells a gone holder (free, exit 75) from a live one.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::{backends, in_parallel, key, signal, stderr, wait_for_line, Backend, BIN};

/// A bound for what should take far less, so that a broken build fails rather than
/// hangs. Not a timing assertion.
const LIVENESS: Duration = Duration::from_secs(20);

/// The lock on `k` as `list --json` reports it, if it is listed.
fn listed(b: &Backend, k: &str) -> Option<serde_json::Value> {
    let o = b.sqlock(&["list", "--json"]);
    assert!(o.status.success(), "{}: {}", b.name, stderr(&o));
    let all: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    all.as_array()?.iter().find(|l| l["key"] == k).cloned()
}

fn time(v: &serde_json::Value) -> chrono::DateTime<chrono::FixedOffset> {
    chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap()).unwrap()
}

/// Starts a `sqlock run` holder of `k` with a 60 s TTL (and `extra` options), waits
/// until its command runs, SIGKILLs the sqlock process, and returns the dead lease as
/// listed just before.
fn killed_holder(b: &Backend, k: &str, name: &str, extra: &[&str]) -> serde_json::Value {
    let token_file = b.path(&format!("{name}.token"));
    let script = format!(
        "echo $SQLOCK_FENCING_TOKEN > {}; exec sleep 300",
        token_file.display()
    );
    let mut args = vec!["run", "--ttl", "60s"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[k, "--", "sh", "-c", &script]);
    let mut holder = b.spawn(name, &args);
    wait_for_line(&token_file, LIVENESS);
    let dead = listed(b, k).unwrap_or_else(|| panic!("{}: {k} not listed", b.name));
    // The sqlock process, not its command: nothing releases the lock.
    signal(holder.id(), "KILL");
    holder.wait().unwrap();
    dead
}

/// Runs `sqlock run ARGS --wait 30s K` whose command lists the locks, from inside its
/// hold (its own grant, on the server's clock): every lock listed, and the run's own.
fn run_listing(b: &Backend, k: &str, args: &[&str]) -> (serde_json::Value, serde_json::Value) {
    let listing = b.path("listing.json");
    let script = format!(
        "{BIN} --database-url '{}' --table {} list --json > {}",
        b.url,
        b.table,
        listing.display()
    );
    let mut run = vec!["run"];
    run.extend_from_slice(args);
    run.extend_from_slice(&["--wait", "30s", k, "--", "sh", "-c", &script]);
    let next = b.sqlock(&run);
    assert!(next.status.success(), "{}: {}", b.name, stderr(&next));
    let all: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&listing).unwrap()).unwrap();
    let mine = all
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["key"] == k)
        .cloned()
        .unwrap_or_else(|| panic!("{}: the next run's lock is not listed: {all}", b.name));
    (all, mine)
}

#[test]
fn a_killed_run_leaves_the_key_to_the_next_run_at_once() {
    in_parallel(backends("cli_presence"), |b| {
        let k = key("presence");
        let dead = killed_holder(&b, &k, "holder", &[]);
        let killed = Instant::now();
        let (_, mine) = run_listing(&b, &k, &[]);
        let took = killed.elapsed();
        println!(
            "{}: a SIGKILLed `sqlock run` (TTL 60 s) was followed by the next one's \
             command {took:?} after the kill, start-up included",
            b.name
        );
        assert!(
            time(&mine["held_since"]) < time(&dead["expires_at"]),
            "{}: granted at {} only, after the dead lease's expiry {}",
            b.name,
            mine["held_since"],
            dead["expires_at"]
        );
        assert!(
            mine["fencing_token"].as_i64() > dead["fencing_token"].as_i64(),
            "{}: tokens rise",
            b.name
        );
        assert_ne!(mine["owner"], dead["owner"]);
    });
}

/// A SIGKILLed `sqlock run --fair` leaves its lock to the next `--fair` run at once:
/// `status` says the holder is gone (free, exit 75) a moment after the kill, and the
/// next run's queue hands it the lock before the dead grant's expiry, with a higher
/// token.
#[test]
fn a_killed_fair_run_leaves_the_key_to_the_next_fair_run_at_once() {
    in_parallel(backends("cli_presence_fair"), |b| {
        let k = key("presence-fair");
        let dead = killed_holder(&b, &k, "holder", &["--fair"]);
        let killed = Instant::now();
        assert_eq!(dead["strategy"], "fair", "{}: {dead}", b.name);
        assert_eq!(dead["holder_gone"], false, "{}: {dead}", b.name);
        let started = Instant::now();
        let gone = loop {
            let o = b.sqlock(&["status", "--json", &k]);
            if o.status.code() == Some(75) {
                break serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap();
            }
            assert_eq!(o.status.code(), Some(0), "{}: {}", b.name, stderr(&o));
            assert!(started.elapsed() < LIVENESS, "{}: never said gone", b.name);
            thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(gone["holder_gone"], true, "{}: {gone}", b.name);
        assert_eq!(gone["owner"], dead["owner"], "{}: {gone}", b.name);
        let (_, mine) = run_listing(&b, &k, &["--fair"]);
        println!(
            "{}: a SIGKILLed `sqlock run --fair` (TTL 60 s) was followed by the next \
             `--fair` run's command {:?} after the kill, start-up and status included",
            b.name,
            killed.elapsed()
        );
        assert_eq!(mine["strategy"], "fair", "{}: {mine}", b.name);
        assert_ne!(mine["owner"], dead["owner"], "{}: {mine}", b.name);
        assert!(
            time(&mine["held_since"]) < time(&dead["expires_at"]),
            "{}: granted at {} only, after the dead grant's expiry {}",
            b.name,
            mine["held_since"],
            dead["expires_at"]
        );
        assert!(
            mine["fencing_token"].as_i64() > dead["fencing_token"].as_i64(),
            "{}: tokens rise",
            b.name
        );
    });
}

/// A SIGKILLed `sqlock run --shared` (a read of the name) holds the name for nobody:
/// the next `sqlock run --exclusive` (the write side) drops the dead read and runs at
/// once, granted before the read would have expired, with a higher token.
#[test]
fn a_killed_shared_run_leaves_the_name_to_an_exclusive_run_at_once() {
    in_parallel(backends("cli_presence_shared"), |b| {
        let k = key("presence-shared");
        let _ = killed_holder(&b, &k, "reader", &["--shared"]);
        let killed = Instant::now();
        // The dead read's own row, as listed: NAME@read:OWNER.
        let o = b.sqlock(&["list", "--json"]);
        let all: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let read = all
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["rwlock"] == k.as_str() && l["side"] == "read")
            .cloned()
            .unwrap_or_else(|| panic!("{}: the dead read is not listed: {all}", b.name));
        let (all, mine) = run_listing(&b, &k, &["--exclusive"]);
        println!(
            "{}: a SIGKILLed `sqlock run --shared` (TTL 60 s) was followed by the next \
             `--exclusive` run's command {:?} after the kill, start-up included",
            b.name,
            killed.elapsed()
        );
        assert_eq!(mine["strategy"], "write", "{}: {mine}", b.name);
        assert!(
            time(&mine["held_since"]) < time(&read["expires_at"]),
            "{}: written at {} only, after the dead read's expiry {}",
            b.name,
            mine["held_since"],
            read["expires_at"]
        );
        assert!(
            mine["fencing_token"].as_i64() > read["fencing_token"].as_i64(),
            "{}: tokens rise",
            b.name
        );
        assert!(
            !all.as_array()
                .unwrap()
                .iter()
                .any(|l| l["key"] == read["key"]),
            "{}: the dead read is still listed: {all}",
            b.name
        );
    });
}

#[test]
fn without_presence_a_killed_run_keeps_the_key() {
    in_parallel(backends("cli_no_presence"), |b| {
        let k = key("no-presence");
        killed_holder(&b, &k, "holder", &["--no-presence"]);
        // Tried for a while: never granted (the lease has a minute to go).
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(1) {
            let next = b
                .command(&["run", "--no-wait", &k, "--", "true"])
                .env("SQLOCK_NO_PRESENCE", "1")
                .output()
                .unwrap();
            assert_eq!(
                next.status.code(),
                Some(75),
                "{}: {}",
                b.name,
                stderr(&next)
            );
            thread::sleep(Duration::from_millis(50));
        }
        let lease = listed(&b, &k).unwrap_or_else(|| panic!("{}: not listed", b.name));
        assert!(lease["expires_in_ms"].as_u64().unwrap() > 30_000);
        // Its holder cannot be told gone: `status` says held (exit 0).
        assert_eq!(lease["holder_gone"], false, "{}: {lease}", b.name);
        let status = b.sqlock(&["status", &k]);
        assert_eq!(
            status.status.code(),
            Some(0),
            "{}: {}",
            b.name,
            stderr(&status)
        );
    });
}

/// `status` of a key whose `sqlock run` was SIGKILLed with presence: free (exit 75),
/// its holder gone, in text and JSON, while the dead lease is still unexpired; `list`
/// marks the holder gone.
#[test]
fn status_tells_a_gone_holder_from_a_live_one() {
    in_parallel(backends("cli_presence_status"), |b| {
        let k = key("gone");
        let dead = killed_holder(&b, &k, "holder", &[]);
        assert_eq!(
            dead["holder_gone"], false,
            "{}: listed while alive: {dead}",
            b.name
        );
        // The server ends the dead process's sessions a moment after the kill.
        let started = Instant::now();
        let text = loop {
            let o = b.sqlock(&["status", &k]);
            if o.status.code() == Some(75) {
                break String::from_utf8_lossy(&o.stdout).into_owned();
            }
            assert_eq!(o.status.code(), Some(0), "{}: {}", b.name, stderr(&o));
            assert!(started.elapsed() < LIVENESS, "{}: never said gone", b.name);
            thread::sleep(Duration::from_millis(20));
        };
        assert!(
            text.contains("its holder's process is gone"),
            "{}: {text}",
            b.name
        );
        assert!(text.contains("(gone)"), "{}: {text}", b.name);
        let o = b.sqlock(&["status", "--json", &k]);
        assert_eq!(o.status.code(), Some(75), "{}: {}", b.name, stderr(&o));
        let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(json["held"], false, "{}: {json}", b.name);
        assert_eq!(json["holder_gone"], true, "{}: {json}", b.name);
        assert_eq!(json["owner"], dead["owner"], "{}: {json}", b.name);
        assert!(
            json["expires_in_ms"].as_u64().unwrap() > 30_000,
            "{}: {json}",
            b.name
        );
        let lease = listed(&b, &k).unwrap_or_else(|| panic!("{}: not listed", b.name));
        assert_eq!(lease["holder_gone"], true, "{}: {lease}", b.name);
    });
}

#[test]
fn help_tells_of_presence() {
    let o = std::process::Command::new(BIN)
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(help.contains("--no-presence"), "{help}");
    assert!(help.contains("presence marker"), "{help}");
}
