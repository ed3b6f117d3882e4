//! `sqlock status KEY [--json]`: who holds a lock (owner, fencing token, strategy,
//! expiry), exit 0 when held and 75 when free, on every backend and for every
//! strategy `status` can see.

mod common;

use std::fs;
use std::time::Duration;

use common::{
    backends, in_parallel, key, stderr, stdout, wait_exit, wait_for_line, Backend, LEASED,
};

/// `status --json KEY`, parsed, with its exit status.
fn status_json(b: &Backend, k: &str) -> (Option<i32>, serde_json::Value) {
    let o = b.sqlock(&["status", "--json", k]);
    let json = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{}: status --json is not JSON ({e}): {} {}",
            b.name,
            stdout(&o),
            stderr(&o)
        )
    });
    (o.status.code(), json)
}

#[test]
fn status_shows_the_holder_and_exits_0_held_75_free() {
    let cases: Vec<(Backend, &str)> = backends("cli_status")
        .into_iter()
        .flat_map(|b| LEASED.iter().map(move |s| (b.clone(), *s)))
        .collect();
    in_parallel(cases, |(b, strategy)| {
        let what = format!("{} {strategy}", b.name);
        let k = key(&format!("status-{strategy}"));

        // Free: said so, exit 75, on stdout as text and as JSON.
        let o = b.sqlock(&["status", &k]);
        assert_eq!(o.status.code(), Some(75), "{what}: {}", stderr(&o));
        assert!(stdout(&o).contains("free"), "{what}: {}", stdout(&o));
        let (code, json) = status_json(&b, &k);
        assert_eq!(code, Some(75), "{what}");
        assert_eq!(json["held"], false, "{what}: {json}");
        assert_eq!(json["key"], k.as_str(), "{what}: {json}");

        // Held: the holder's command writes the identity it was given, then waits for
        // the test to let it go.
        let id_file = b.path(&format!("{strategy}.id"));
        let go = b.path(&format!("{strategy}.go"));
        let script = format!(
            "echo \"$SQLOCK_OWNER $SQLOCK_FENCING_TOKEN\" > {}; \
             while [ ! -e {} ]; do sleep 0.05; done",
            id_file.display(),
            go.display()
        );
        let log = format!("{strategy}-holder");
        let mut holder = b.spawn(
            &log,
            &[
                "run",
                "--strategy",
                strategy,
                "--ttl",
                "20s",
                &k,
                "--",
                "sh",
                "-c",
                &script,
            ],
        );
        let id = wait_for_line(&id_file, Duration::from_secs(15));
        let (owner, token) = id.trim().split_once(' ').expect("owner and token");

        let (code, json) = status_json(&b, &k);
        assert_eq!(code, Some(0), "{what}: {json}");
        assert_eq!(json["held"], true, "{what}: {json}");
        assert_eq!(json["key"], k.as_str(), "{what}: {json}");
        assert_eq!(json["owner"], owner, "{what}: {json}");
        assert_eq!(json["fencing_token"].to_string(), token, "{what}: {json}");
        assert_eq!(json["strategy"], strategy, "{what}: {json}");
        assert_eq!(json["hold_count"], 1, "{what}: {json}");
        let left = json["expires_in_ms"].as_u64().expect("expires_in_ms");
        assert!(left > 0 && left <= 20_000, "{what}: {json}");
        assert!(
            json["held_since"].is_string() && json["expires_at"].is_string(),
            "{what}: {json}"
        );

        let o = b.sqlock(&["status", &k]);
        assert_eq!(o.status.code(), Some(0), "{what}: {}", stderr(&o));
        let text = stdout(&o);
        for want in ["held", owner, token, strategy, "expires", "UTC"] {
            assert!(text.contains(want), "{what}: {want:?} missing from {text}");
        }

        fs::write(&go, "").unwrap();
        assert_eq!(
            wait_exit(&mut holder, Duration::from_secs(15)),
            0,
            "{what}: {}",
            b.log(&log)
        );
        // Released: free again.
        let (code, json) = status_json(&b, &k);
        assert_eq!(code, Some(75), "{what}: {json}");
    });
}

#[test]
fn status_refuses_bad_keys_and_needs_its_table() {
    for b in backends("cli_status_bad") {
        for args in [
            &["status"][..],
            &["status", ""],
            &["status", &"k".repeat(256)],
        ] {
            let o = b.sqlock(args);
            assert_eq!(
                o.status.code(),
                Some(64),
                "{} {args:?}: {}",
                b.name,
                stderr(&o)
            );
        }
        if b.name != "sqlite" {
            let missing = Backend {
                table: "cli_status_never_created".into(),
                ..b.clone()
            };
            common::drop_table(&missing).unwrap();
            let o = missing.sqlock(&["status", "k"]);
            assert_eq!(o.status.code(), Some(69), "{}: {}", b.name, stderr(&o));
        }
    }
}

/// A command that writes `$SQLOCK_OWNER` to `<name>.in` and waits for `<name>.go`.
fn holding(b: &Backend, name: &str) -> (String, std::path::PathBuf, std::path::PathBuf) {
    let inside = b.path(&format!("{name}.in"));
    let go = b.path(&format!("{name}.go"));
    let script = format!(
        "echo \"$SQLOCK_OWNER\" > {0}; while [ ! -e {1} ]; do sleep 0.02; done",
        inside.display(),
        go.display()
    );
    (script, inside, go)
}

/// Polls `status --json KEY` until `ready` holds of it, for 30 s at most.
fn status_until(
    b: &Backend,
    k: &str,
    ready: impl Fn(&serde_json::Value) -> bool,
) -> (Option<i32>, serde_json::Value) {
    let started = std::time::Instant::now();
    loop {
        let (code, json) = status_json(b, k);
        if ready(&json) {
            return (code, json);
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{}: status never showed what was awaited: {json}",
            b.name
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn status_shows_readers_waiting_writers_and_permits() {
    in_parallel(backends("cli_status_family"), |b| {
        // A read-write lock: a shared run holds it, an exclusive run waits behind it.
        let k = key("status-rw");
        let (script, inside, go) = holding(&b, "reader");
        let mut reader = b.spawn(
            "reader",
            &["run", "--shared", &k, "--", "sh", "-c", &script],
        );
        let reader_owner = wait_for_line(&inside, Duration::from_secs(30))
            .trim()
            .to_owned();
        let mut writer = b.spawn("writer", &["run", "--exclusive", &k, "--", "true"]);
        let (code, json) = status_until(&b, &k, |j| {
            j["waiting_writers"]
                .as_array()
                .is_some_and(|w| w.len() == 1)
        });
        assert_eq!(code, Some(0), "{}: {json}", b.name);
        assert_eq!(json["held"], true, "{}: {json}", b.name);
        assert_eq!(json["shared"], "read", "{}: {json}", b.name);
        assert_eq!(
            json["readers"],
            serde_json::json!([reader_owner]),
            "{}: {json}",
            b.name
        );
        assert_eq!(
            json["writer"],
            serde_json::Value::Null,
            "{}: {json}",
            b.name
        );
        // The waiting writer is no holder: the owner shown is nobody's (shared).
        assert_eq!(json["owner"], "", "{}: {json}", b.name);
        let text = stdout(&b.sqlock(&["status", &k]));
        for want in [
            "held in shared mode".to_owned(),
            format!("readers          1 ({reader_owner})"),
            "waiting writers  1 (".to_owned(),
        ] {
            assert!(
                text.contains(&want),
                "{}: {want:?} missing from {text}",
                b.name
            );
        }
        fs::write(&go, "").unwrap();
        for (child, log) in [(&mut reader, "reader"), (&mut writer, "writer")] {
            assert_eq!(
                wait_exit(child, Duration::from_secs(30)),
                0,
                "{}: {}",
                b.name,
                b.log(log)
            );
        }

        // A semaphore of 3: two runs hold a permit each.
        let s = key("status-sem");
        let mut runs = Vec::new();
        let mut gos = Vec::new();
        for i in 0..2 {
            let (script, inside, go) = holding(&b, &format!("permit{i}"));
            let log = format!("permit{i}");
            runs.push((
                b.spawn(
                    &log,
                    &["run", "--limit", "3", &s, "--", "sh", "-c", &script],
                ),
                log,
            ));
            wait_for_line(&inside, Duration::from_secs(30));
            gos.push(go);
        }
        let (code, json) = status_json(&b, &s);
        assert_eq!(code, Some(0), "{}: {json}", b.name);
        assert_eq!(json["shared"], "semaphore", "{}: {json}", b.name);
        assert_eq!(json["permits"], 3, "{}: {json}", b.name);
        assert_eq!(json["permits_held"], 2, "{}: {json}", b.name);
        assert_eq!(
            json["permit_holders"].as_array().map(Vec::len),
            Some(2),
            "{}: {json}",
            b.name
        );
        let text = stdout(&b.sqlock(&["status", &s]));
        assert!(text.contains("2 of 3 held"), "{}: {text}", b.name);
        for go in &gos {
            fs::write(go, "").unwrap();
        }
        for (child, log) in &mut runs {
            assert_eq!(
                wait_exit(child, Duration::from_secs(30)),
                0,
                "{}: {}",
                b.name,
                b.log(log)
            );
        }
        let (code, json) = status_json(&b, &s);
        assert_eq!(code, Some(75), "{}: {json}", b.name);
    });
}

/// A permit whose holder died (a SIGKILLed `sqlock run --limit`, with presence) is
/// shown apart, gone: counted out of "held", its owner under `gone_permit_holders`;
/// with every permit's holder gone the name is free to a health check (exit 75).
#[test]
fn status_shows_the_permits_of_gone_holders_apart() {
    in_parallel(backends("cli_status_gone_permits"), |b| {
        let s = key("status-gone");
        let mut runs = Vec::new();
        let mut owners = Vec::new();
        let mut gos = Vec::new();
        for i in 0..2 {
            let (script, inside, go) = holding(&b, &format!("gone{i}"));
            runs.push(b.spawn(
                &format!("gone{i}"),
                &["run", "--limit", "3", &s, "--", "sh", "-c", &script],
            ));
            owners.push(
                wait_for_line(&inside, Duration::from_secs(30))
                    .trim()
                    .to_owned(),
            );
            gos.push(go);
        }
        // The sqlock process, not its command: nothing gives the permit back.
        common::signal(runs[0].id(), "KILL");
        let (code, json) = status_until(&b, &s, |j| j["permits_gone"] == 1);
        assert_eq!(code, Some(0), "{}: {json}", b.name);
        assert_eq!(json["held"], true, "{}: {json}", b.name);
        assert_eq!(json["permits_held"], 1, "{}: {json}", b.name);
        assert_eq!(json["permit_holders"], serde_json::json!([owners[1]]));
        assert_eq!(json["gone_permit_holders"], serde_json::json!([owners[0]]));
        let text = stdout(&b.sqlock(&["status", &s]));
        assert!(
            text.contains("1 of 3 held, 1 more of holders gone"),
            "{}: {text}",
            b.name
        );
        common::signal(runs[1].id(), "KILL");
        let (code, json) = status_until(&b, &s, |j| j["permits_gone"] == 2);
        assert_eq!(code, Some(75), "{}: {json}", b.name);
        assert_eq!(json["held"], false, "{}: {json}", b.name);
        assert_eq!(json["permits_held"], 0, "{}: {json}", b.name);
        let o = b.sqlock(&["status", &s]);
        assert_eq!(o.status.code(), Some(75), "{}", b.name);
        assert!(
            stdout(&o).contains("free: the holders of its permits or reads are gone"),
            "{}: {}",
            b.name,
            stdout(&o)
        );
        for go in &gos {
            fs::write(go, "").unwrap();
        }
        for child in &mut runs {
            assert_eq!(wait_exit(child, Duration::from_secs(30)), -1, "{}", b.name);
        }
    });
}

/// A read whose holder died (a SIGKILLed `sqlock run --shared`, with presence) is shown
/// apart, gone: not among the readers, its owner under `gone_readers`; with no live
/// reader and no writer the name is free to a health check (exit 75).
#[test]
fn status_shows_the_reads_of_gone_holders_apart() {
    in_parallel(backends("cli_status_gone_reads"), |b| {
        let k = key("status-gone-read");
        let (script, inside, go) = holding(&b, "gone-reader");
        let mut reader = b.spawn(
            "gone-reader",
            &["run", "--shared", &k, "--", "sh", "-c", &script],
        );
        let owner = wait_for_line(&inside, Duration::from_secs(30))
            .trim()
            .to_owned();
        let (code, json) = status_json(&b, &k);
        assert_eq!(code, Some(0), "{}: {json}", b.name);
        assert_eq!(json["readers"], serde_json::json!([owner]), "{}", b.name);
        // The sqlock process, not its command: nothing gives the read back.
        common::signal(reader.id(), "KILL");
        let (code, json) = status_until(&b, &k, |j| {
            j["gone_readers"].as_array().is_some_and(|g| g.len() == 1)
        });
        assert_eq!(code, Some(75), "{}: {json}", b.name);
        assert_eq!(json["held"], false, "{}: {json}", b.name);
        assert_eq!(json["readers"], serde_json::json!([]), "{}: {json}", b.name);
        assert_eq!(
            json["gone_readers"],
            serde_json::json!([owner]),
            "{}",
            b.name
        );
        let o = b.sqlock(&["status", &k]);
        assert_eq!(o.status.code(), Some(75), "{}", b.name);
        let text = stdout(&o);
        assert!(text.contains("free: the holders of its permits or reads are gone"));
        assert!(text.contains(&format!("1 ({owner})")), "{}: {text}", b.name);
        assert!(text.contains("gone readers"), "{}: {text}", b.name);
        fs::write(&go, "").unwrap();
        assert_eq!(
            wait_exit(&mut reader, Duration::from_secs(30)),
            -1,
            "{}",
            b.name
        );
    });
}
