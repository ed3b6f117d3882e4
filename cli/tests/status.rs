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
