//! The peers part runs end to end on PostgreSQL and MariaDB, briefly, against the
//! real servers and the real peers: sqlx's `PgAdvisoryLock` and `GET_LOCK` always,
//! the distributed-lock crates when built with the `peers` feature. No timing is
//! asserted: figures come from the benchmark, never from tests.

// Each test file uses a part of the shared helpers.
#[allow(dead_code)]
mod common;

use common::{backends, in_parallel, stderr, Backend};
use serde_json::Value;

fn number(v: &Value, field: &str) -> f64 {
    v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} is not a number in {v}"))
}

/// The rows of `part` in the peers section, by contender.
fn rows<'a>(report: &'a Value, part: &str) -> &'a Vec<Value> {
    report["peers"][part]
        .as_array()
        .unwrap_or_else(|| panic!("no peers.{part} in {report}"))
}

fn contenders(rows: &[Value]) -> Vec<&str> {
    rows.iter()
        .map(|r| r["contender"].as_str().unwrap())
        .collect()
}

fn peers_run(b: Backend) {
    let json = b.path("peers.json");
    let o = b.bench(&[
        "--parts=peers",
        "--duration=200ms",
        "--contended-duration=300ms",
        "--rounds=1",
        "--waiters=2",
        "--crashes=1",
        "--flush-cycles=10",
        &format!("--json={}", json.display()),
    ]);
    assert!(
        o.status.success(),
        "{}: bench failed: {}",
        b.name,
        stderr(&o)
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap())
        .unwrap_or_else(|e| panic!("{}: the JSON does not parse: {e}", b.name));

    let peer = if b.name == "postgres" {
        "sqlx PgAdvisoryLock"
    } else {
        "GET_LOCK (sqlx)"
    };
    let crate_peer = format!("distributed-lock-{b} 0.2", b = b.name);
    let built = cfg!(feature = "peers");
    assert_eq!(report["peers"]["distributed_lock_built"], built);

    let cycles = rows(&report, "cycles");
    for who in [
        "sqlock lease",
        "sqlock lease, raw statements",
        "sqlock for-update",
        peer,
    ] {
        for n in [1, 8] {
            let row = cycles
                .iter()
                .find(|r| r["contender"] == who && r["workers"] == n)
                .unwrap_or_else(|| panic!("{}: no cycles of {who} with {n}", b.name));
            assert!(number(row, "ops") > 0.0, "{}: {row}", b.name);
            assert!(number(row, "statements_per_op") >= 2.0, "{}: {row}", b.name);
        }
    }
    assert_eq!(
        contenders(cycles).contains(&crate_peer.as_str()),
        built,
        "{}: {cycles:?}",
        b.name
    );

    let handoff = rows(&report, "handoff");
    assert!(
        contenders(handoff).contains(&peer),
        "{}: {handoff:?}",
        b.name
    );
    for h in handoff {
        assert!(number(h, "grants") > 0.0, "{}: {h}", b.name);
        assert_eq!(h["workers"], 3);
    }

    let crash = rows(&report, "crash");
    for who in ["sqlock lease", "sqlock for-update", peer] {
        let row = crash
            .iter()
            .find(|r| r["contender"] == who)
            .unwrap_or_else(|| panic!("{}: no crash recovery of {who}", b.name));
        assert_eq!(row["kills"], 1, "{}: {row}", b.name);
        assert!(number(row, "recovery_p50_us") > 0.0, "{}: {row}", b.name);
    }
    assert_eq!(contenders(crash).contains(&crate_peer.as_str()), built);

    let flushes = rows(&report, "flushes");
    for f in flushes {
        assert!(number(f, "statements_per_cycle") >= 2.0, "{}: {f}", b.name);
        assert!(number(f, "flushes_per_cycle") >= 0.0, "{}: {f}", b.name);
    }
    let lease = flushes
        .iter()
        .find(|f| f["contender"] == "sqlock lease")
        .unwrap();
    // A lease is written and committed durably: the server counted its flushes.
    assert!(
        number(lease, "flushes_per_cycle") > 0.0,
        "{}: {lease}",
        b.name
    );

    let targets = report["targets"].as_array().expect("targets");
    for name in ["crash recovery: sqlock lease", "peers: lease library / raw"] {
        assert!(
            targets
                .iter()
                .any(|t| t["name"].as_str().unwrap().starts_with(name)),
            "{}: no target {name}: {targets:?}",
            b.name
        );
    }
}

#[test]
fn peers_run_on_the_servers() {
    let servers: Vec<Backend> = backends("bench_peers")
        .into_iter()
        .filter(|b| b.name != "sqlite")
        .collect();
    in_parallel(servers, peers_run);
}

#[test]
fn peers_refuse_sqlite() {
    let dir = common::scratch_dir("bench_peers_sqlite");
    let b = Backend {
        name: "sqlite",
        url: format!("sqlite://{}", dir.join("locks.db").display()),
        table: "bench_peers_sqlite".into(),
        dir,
    };
    let o = b.bench(&["--parts=peers", "--duration=100ms"]);
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("PostgreSQL or MariaDB"),
        "{}",
        stderr(&o)
    );
}
