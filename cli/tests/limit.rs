//! `sqlock run --limit N`: at most N copies of a command at once, each with a permit
//! of the semaphore KEY in its environment; a busy semaphore exits 75 with --no-wait;
//! another N, a permit's key and a bad --limit exit 64; a signal is passed on and the
//! permit given back; a killed holder's permit comes back at its TTL; `list` shows the
//! semaphore with N and its holders.

mod common;

use std::fs;
use std::time::Duration;

use common::{backends, in_parallel, key, signal, stderr, stdout, wait_exit, wait_for_line};

/// A bound for what should take a TTL or less, so that a broken build fails rather
/// than hangs. Not a timing assertion.
const LIVENESS: Duration = Duration::from_secs(30);

#[test]
fn at_most_n_copies_run_and_list_shows_them() {
    in_parallel(backends("cli_limit"), |b| {
        let k = key("limit");
        let mut holders = Vec::new();
        let mut env = Vec::new();
        for i in 0..2 {
            let ready = b.path(&format!("limit-{i}.env"));
            let script = format!(
                "trap 'exit 3' TERM; echo \"$SQLOCK_KEY $SQLOCK_LIMIT $SQLOCK_PERMIT \
                 $SQLOCK_FENCING_TOKEN\" > {}; sleep 60 & wait",
                ready.display()
            );
            let log = format!("limit-{i}");
            holders.push(b.spawn(
                &log,
                &["run", "--limit", "2", &k, "--", "sh", "-c", &script],
            ));
            env.push(wait_for_line(&ready, LIVENESS));
        }
        let fields: Vec<Vec<&str>> = env.iter().map(|e| e.split_whitespace().collect()).collect();
        for f in &fields {
            assert_eq!(f.len(), 4, "{}: {f:?}", b.name);
            assert_eq!((f[0], f[1]), (k.as_str(), "2"), "{}", b.name);
            assert!(
                f[2].starts_with(&format!("semaphore:{k}#")),
                "{}: {f:?}",
                b.name
            );
            assert!(f[3].parse::<i64>().unwrap() > 0);
        }
        assert_ne!(
            fields[0][2], fields[1][2],
            "{}: two permits, two slots",
            b.name
        );

        // A third copy: busy.
        let o = b.sqlock(&["run", "--limit", "2", "--no-wait", &k, "--", "true"]);
        assert_eq!(o.status.code(), Some(75), "{}: {}", b.name, stderr(&o));
        let o = b.sqlock(&["run", "--limit", "2", "--wait", "100ms", &k, "--", "true"]);
        assert_eq!(o.status.code(), Some(75), "{}: {}", b.name, stderr(&o));
        // Another N: refused, whether permits are free or not.
        let o = b.sqlock(&["run", "--limit", "3", "--no-wait", &k, "--", "true"]);
        assert_eq!(o.status.code(), Some(64), "{}: {}", b.name, stderr(&o));
        assert!(
            stderr(&o).contains("has 2 permits, not 3"),
            "{}",
            stderr(&o)
        );

        // The list: in JSON, the permits as locks with their semaphore; in text, the
        // semaphore with N, how many are held, and its holders.
        let o = b.sqlock(&["list", "--json"]);
        assert!(o.status.success(), "{}: {}", b.name, stderr(&o));
        let all: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let permits: Vec<&serde_json::Value> = all
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["semaphore"] == k.as_str())
            .collect();
        assert_eq!(permits.len(), 2, "{}: {all}", b.name);
        assert!(
            permits.iter().all(|p| p["permits"] == 2),
            "{}: {all}",
            b.name
        );
        let o = b.sqlock(&["list"]);
        let text = stdout(&o);
        let line = text
            .lines()
            .find(|l| l.starts_with(&k))
            .unwrap_or_else(|| panic!("{}: no line for the semaphore: {text}", b.name));
        assert_eq!(
            line.split_whitespace().collect::<Vec<_>>(),
            [k.as_str(), "2", "2"],
            "{}: {text}",
            b.name
        );
        assert!(
            text.contains(fields[0][2]) && text.contains(fields[1][2]),
            "{text}"
        );

        // A signal is passed on, and the permit given back.
        signal(holders[0].id(), "TERM");
        let code = wait_exit(&mut holders[0], LIVENESS);
        assert_eq!(code, 3, "{}: {}", b.name, b.log("limit-0"));
        let o = b.sqlock(&["run", "--limit", "2", "--no-wait", &k, "--", "true"]);
        assert_eq!(o.status.code(), Some(0), "{}: {}", b.name, stderr(&o));
        signal(holders[1].id(), "TERM");
        assert_eq!(wait_exit(&mut holders[1], LIVENESS), 3, "{}", b.name);
    });
}

#[test]
fn a_killed_copy_gives_its_permit_back_at_its_ttl() {
    in_parallel(backends("cli_limit_kill"), |b| {
        let k = key("limit-kill");
        let ready = b.path("kill.token");
        let script = format!(
            "echo $SQLOCK_FENCING_TOKEN > {}; exec sleep 60",
            ready.display()
        );
        let mut holder = b.spawn(
            "kill-holder",
            &[
                "run",
                "--limit",
                "1",
                "--ttl",
                "2s",
                "--no-presence",
                &k,
                "--",
                "sh",
                "-c",
                &script,
            ],
        );
        let token: i64 = wait_for_line(&ready, LIVENESS).trim().parse().unwrap();
        let o = b.sqlock(&["run", "--limit", "1", "--no-wait", &k, "--", "true"]);
        assert_eq!(o.status.code(), Some(75), "{}: {}", b.name, stderr(&o));
        signal(holder.id(), "KILL");
        assert_eq!(wait_exit(&mut holder, LIVENESS), -1, "{}: killed", b.name);
        // Its permit lapses within its TTL, on the database clock.
        let o = b.sqlock(&["list", "--json"]);
        let all: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        if let Some(p) = all
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["semaphore"] == k.as_str())
        {
            assert!(
                p["expires_in_ms"].as_u64().unwrap() <= 2_000,
                "{}: {p}",
                b.name
            );
        }
        let next = b.path("next.token");
        let script = format!("echo $SQLOCK_FENCING_TOKEN > {}", next.display());
        let o = b.sqlock(&[
            "run", "--limit", "1", "--wait", "20s", &k, "--", "sh", "-c", &script,
        ]);
        assert_eq!(o.status.code(), Some(0), "{}: {}", b.name, stderr(&o));
        let after: i64 = fs::read_to_string(&next).unwrap().trim().parse().unwrap();
        assert!(after > token, "{}: {after} after {token}", b.name);
    });
}

#[test]
fn bad_limits_and_permit_keys_exit_64() {
    in_parallel(backends("cli_limit_bad"), |b| {
        for args in [
            vec!["run", "--limit", "0", "k", "--", "true"],
            vec!["run", "--limit", "1001", "k", "--", "true"],
            vec!["run", "--limit", "x", "k", "--", "true"],
            vec!["run", "--limit", "2", "--fair", "k", "--", "true"],
            vec![
                "run",
                "--limit",
                "2",
                "--strategy",
                "insert",
                "k",
                "--",
                "true",
            ],
            vec!["run", "--limit", "2", "--at-least", "1s", "k", "--", "true"],
            vec!["run", "semaphore:k#0", "--", "true"],
        ] {
            let o = b.sqlock(&args);
            assert_eq!(
                o.status.code(),
                Some(64),
                "{} {args:?}: {}",
                b.name,
                stderr(&o)
            );
        }
        let long = "n".repeat(250);
        let o = b.sqlock(&["run", "--limit", "2", &long, "--", "true"]);
        assert_eq!(o.status.code(), Some(64), "{}: {}", b.name, stderr(&o));
    });
}
