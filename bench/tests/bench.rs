//! `sqlock-bench` runs end to end on every backend with tiny durations and writes
//! sane results: valid JSON with the expected fields and counts above zero, CSV and an
//! SVG chart. No timing is asserted: figures come from the benchmark, never from tests.

mod common;

use std::time::Duration;

use common::{backends, in_parallel, stderr, stdout, Backend};
use serde_json::Value;

/// A Redis server for the baseline, when the benchmark was built with it and one
/// answers.
fn redis_url() -> Option<String> {
    if !cfg!(feature = "redis-baseline") {
        return None;
    }
    let url =
        std::env::var("SQLOCK_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let addr = url.trim_start_matches("redis://").trim_end_matches('/');
    let reachable = addr
        .parse()
        .is_ok_and(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_secs(1)).is_ok());
    if !reachable {
        eprintln!(
            "\n*** NOTE: no Redis at {url}; the bench test runs without the Redis baseline ***\n"
        );
    }
    reachable.then_some(url)
}

fn number(v: &Value, field: &str) -> f64 {
    v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} is not a number in {v}"))
}

fn bench_runs(b: Backend) {
    let json = b.path("bench.json");
    let csv = b.path("bench.csv");
    let svg = b.path("bench.svg");
    let mut args = vec![
        "--duration=300ms".to_owned(),
        "--contended-duration=400ms".into(),
        "--rounds=1".into(),
        "--workers=1,2".into(),
        "--waiters=2".into(),
        "--leases=40".into(),
        "--scale-rows=2000".into(),
        format!("--json={}", json.display()),
        format!("--csv={}", csv.display()),
        format!("--svg={}", svg.display()),
    ];
    let redis = if b.name == "sqlite" {
        redis_url()
    } else {
        None
    };
    if let Some(url) = &redis {
        args.push(format!("--redis-url={url}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = b.bench(&args);
    assert!(
        o.status.success(),
        "{}: bench failed: {}",
        b.name,
        stderr(&o)
    );
    assert!(stdout(&o).contains("Targets"), "{}: {}", b.name, stdout(&o));

    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap())
        .unwrap_or_else(|e| panic!("{}: the JSON does not parse: {e}", b.name));
    assert_eq!(report["backend"], b.name);
    assert!(report["server"].as_str().is_some_and(|s| !s.is_empty()));

    // The read lock and the mutex, with 1 and 8 workers, each made some cycles.
    let rw = report["rwlock"].as_array().expect("rwlock rows");
    assert_eq!(rw.len(), 4, "{}: {rw:?}", b.name);
    assert!(
        rw.iter().all(|m| number(m, "cycles") > 0.0),
        "{}: {rw:?}",
        b.name
    );
    // The semaphore beside the mutex, with 1 and 8 workers.
    let semaphore = report["semaphore"].as_array().expect("semaphore rows");
    assert_eq!(semaphore.len(), 4, "{}: {semaphore:?}", b.name);
    assert!(
        semaphore.iter().all(|r| number(r, "ops_per_sec") > 0.0),
        "{}: {semaphore:?}",
        b.name
    );

    let rows = report["uncontended"].as_array().expect("uncontended rows");
    let strategies = b.strategies();
    // Library and raw per strategy, native locks on servers, Redis when given; twice.
    let per_count =
        2 * strategies.len() + usize::from(b.name != "sqlite") + usize::from(redis.is_some());
    assert_eq!(rows.len(), 2 * per_count, "{}: {rows:?}", b.name);
    for row in rows {
        assert!(number(row, "ops") > 0.0, "{}: {row}", b.name);
        assert!(number(row, "ops_per_sec") > 0.0, "{}: {row}", b.name);
        assert!(number(row, "acquire_p99_us") >= number(row, "acquire_p50_us"));
        if row["variant"] != "redis" {
            assert!(number(row, "statements_per_op") >= 2.0, "{}: {row}", b.name);
        }
    }
    for s in ["lease", "insert"] {
        let rt = report["round_trips"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["strategy"] == s)
            .unwrap_or_else(|| panic!("{}: no round trips for {s}", b.name));
        assert!(number(rt, "acquire_statements") >= 1.0, "{}: {rt}", b.name);
        assert!(number(rt, "release_statements") >= 1.0, "{}: {rt}", b.name);
    }

    let contended = report["contended"].as_array().expect("contended rows");
    assert!(!contended.is_empty(), "{}", b.name);
    for c in contended {
        assert!(number(c, "grants") > 0.0, "{}: {c}", b.name);
        // The lease's raw statements hand the key between two owners alone.
        let workers = if c["waiting"] == "raw, back to back" {
            2
        } else {
            3
        };
        assert_eq!(c["workers"], workers, "{}: {c}", b.name);
        // The library's waiters are also measured in a queue standing still: the first
        // waiter polls (or keeps its fallback polling), so it sends something.
        if c["waiting"] == "library, polling" {
            assert!(
                number(c, "still_first_statements_per_sec") > 0.0,
                "{}: {c}",
                b.name
            );
            assert!(number(c, "still_behind_statements_per_sec") >= 0.0);
        }
    }
    // Beside the lease, the floor under its handoff: its raw statements, every
    // handoff measured.
    let raw = contended
        .iter()
        .find(|c| c["waiting"] == "raw, back to back")
        .unwrap_or_else(|| panic!("{}: no raw handoff in {contended:?}", b.name));
    assert_eq!(raw["strategy"], "lease");
    assert_eq!(
        number(raw, "handoffs"),
        number(raw, "grants"),
        "{}: {raw}",
        b.name
    );
    assert!(number(raw, "handoff_p50_us") > 0.0, "{}: {raw}", b.name);
    // PostgreSQL's waiters are measured both polling and woken by notifications.
    let woken = contended.iter().any(|c| c["waiting"] == "library, notify");
    assert_eq!(woken, b.name == "postgres", "{}: {contended:?}", b.name);

    let wd = &report["watchdog"];
    assert_eq!(wd["leases"], 40);
    assert!(number(wd, "ticks") > 0.0, "{}: {wd}", b.name);
    assert!(number(wd, "statements") > 0.0, "{}: {wd}", b.name);

    let scale = &report["scale"];
    assert_eq!(scale["big_rows"], 2000);
    assert!(number(scale, "big_p99_us") > 0.0, "{}: {scale}", b.name);
    assert!(
        !scale["explain"][0]["plan"].as_array().unwrap().is_empty(),
        "{}: {scale}",
        b.name
    );
    let targets = report["targets"].as_array().expect("targets");
    assert!(targets
        .iter()
        .any(|t| t["name"].as_str().unwrap().starts_with("round trips")));

    let csv = std::fs::read_to_string(&csv).unwrap();
    assert!(csv.starts_with("part,variant,strategy,workers,metric,value\n"));
    assert!(csv.lines().count() > rows.len());
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("lease library"));
}

#[test]
fn bench_runs_on_every_backend() {
    in_parallel(backends("bench_runs"), bench_runs);
}

#[test]
fn bench_refuses_bad_input_before_connecting() {
    let b = Backend {
        name: "postgres",
        url: "postgres://nobody@127.0.0.1:1/none".into(),
        table: "bench_bad".into(),
        dir: common::scratch_dir("bench_bad"),
    };
    for args in [
        &["--workers", "0"][..],
        &["--duration", "0s"],
        &["--parts", "everything"],
        &["--strategies", "optimistic"],
    ] {
        let o = b.bench(args);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn bench_refuses_a_table_holding_other_locks() {
    let dir = common::scratch_dir("bench_busy");
    let b = Backend {
        name: "sqlite",
        url: format!("sqlite://{}", dir.join("locks.db").display()),
        table: "bench_busy".into(),
        dir,
    };
    // A lock taken and given back, as `sqlock run a-job -- true` leaves it: its row
    // stays in the table.
    let held = b.on_db(|b, db| async move {
        let locker = common::locker(&b, db)?;
        locker.create_table().await.map_err(|e| e.to_string())?;
        let guard = locker.acquire("a-job").await.map_err(|e| e.to_string())?;
        guard.release().await.map(drop).map_err(|e| e.to_string())
    });
    assert!(held.is_ok(), "{held:?}");
    let o = b.bench(&["--duration", "100ms"]);
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
    assert!(stderr(&o).contains("not the benchmark's"), "{}", stderr(&o));
}
