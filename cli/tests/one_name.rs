//! One name, one holder, whatever the run mode: every pair of `sqlock run` modes on
//! one KEY (a lock of each strategy, `--fair`, `--shared`, `--exclusive`,
//! `--limit N`) and `sqlock elect NAME` on `election:NAME`. While the first runs, the
//! second, with `--no-wait`, exits 75, unless both are `--shared` (reads share) or both
//! `--limit` (a permit is left); once the first is done, the second runs. `elect` has
//! no `--no-wait`: as the second it must not lead while the first runs, and leads once
//! it is done. On every backend.

mod common;

use std::fs;
use std::process::Child;
use std::thread;
use std::time::Duration;

use common::{backends, in_parallel, key, stderr, wait_exit, wait_for_line, Backend};

/// A bound on waits expected to end much sooner.
const LIVENESS: Duration = Duration::from_secs(30);

/// The run modes: the arguments before KEY (`elect` takes the election's name).
const MODES: &[(&str, &[&str])] = &[
    ("lease", &["run"]),
    ("insert", &["run", "--strategy", "insert"]),
    ("for-update", &["run", "--strategy", "for-update"]),
    ("fair", &["run", "--fair"]),
    ("shared", &["run", "--shared"]),
    ("exclusive", &["run", "--exclusive"]),
    ("limit", &["run", "--limit", "2"]),
    ("elect", &["elect"]),
];

/// The modes a backend has: for-update on the servers only.
fn modes(b: &Backend) -> Vec<(&'static str, &'static [&'static str])> {
    MODES
        .iter()
        .copied()
        .filter(|(m, _)| b.name != "sqlite" || *m != "for-update")
        .collect()
}

/// The arguments of `mode` on the election `name` (the key `election:NAME`), with
/// `extra` before the name and `command` after `--`.
fn args<'a>(
    mode: &'a [&'a str],
    name: &'a str,
    key: &'a str,
    extra: &[&'a str],
    command: &[&'a str],
) -> Vec<&'a str> {
    let mut a = mode.to_vec();
    a.extend_from_slice(extra);
    a.push(if mode[0] == "elect" { name } else { key });
    a.push("--");
    a.extend_from_slice(command);
    a
}

/// Whether the second may run beside the first.
fn shares(first: &str, second: &str) -> bool {
    matches!((first, second), ("shared", "shared") | ("limit", "limit"))
}

/// Starts `mode` holding the name: its command says it is in, and waits for `go`.
fn hold(b: &Backend, mode: &[&str], name: &str, k: &str, tag: &str) -> (Child, std::path::PathBuf) {
    let inside = b.path(&format!("{tag}.in"));
    let go = b.path(&format!("{tag}.go"));
    let script = format!(
        "echo in > {}; while [ ! -e {} ]; do sleep 0.02; done",
        inside.display(),
        go.display()
    );
    let child = b.spawn(tag, &args(mode, name, k, &[], &["sh", "-c", &script]));
    wait_for_line(&inside, LIVENESS);
    (child, go)
}

/// `elect` as the second: started while the first holds, it must not lead meanwhile
/// (its command would write its file, and `leader` shows nobody unless the first is an
/// election itself): what it did wrong, if anything; it leads once the first is done.
fn elect_second(
    b: &Backend,
    first: (Child, std::path::PathBuf),
    first_elects: bool,
    name: &str,
    what: &str,
) -> Option<String> {
    let (mut holder, go) = first;
    let led = b.path(&format!("{name}.led"));
    let script = format!("echo led > {}", led.display());
    let mut elect = b.spawn(
        &format!("{name}-elect"),
        &["elect", "--ttl", "2s", name, "--", "sh", "-c", &script],
    );
    // Several of its campaign's polls, and a look at who leads: nobody.
    thread::sleep(Duration::from_millis(500));
    let o = b.sqlock(&["leader", name]);
    let nobody = if first_elects { 0 } else { 75 };
    let wrong = (led.exists() || o.status.code() != Some(nobody)).then(|| {
        format!(
            "{what}: elect led while the first ran (leader exits {:?})",
            o.status.code()
        )
    });
    fs::write(&go, "go").unwrap();
    assert_eq!(wait_exit(&mut holder, LIVENESS), 0, "{what}: the first");
    wait_for_line(&led, LIVENESS);
    assert_eq!(
        wait_exit(&mut elect, LIVENESS),
        0,
        "{what}: {}",
        b.log(&format!("{name}-elect"))
    );
    wrong
}

#[test]
fn every_pair_of_run_modes_excludes_on_one_key() {
    in_parallel(backends("cli_one_name"), |b| {
        // Every pair is tried, and every wrong answer reported together.
        let mut wrong = Vec::new();
        for (first, first_args) in modes(&b) {
            for (second, second_args) in modes(&b) {
                let what = format!("{}: {first} runs, {second} tries", b.name);
                let name = key(&format!("{first}-{second}"));
                let k = format!("election:{name}");
                let held = hold(&b, first_args, &name, &k, &format!("{first}-{second}"));
                if second == "elect" {
                    wrong.extend(elect_second(&b, held, first == "elect", &name, &what));
                    continue;
                }
                let (mut holder, go) = held;
                let o = b.sqlock(&args(second_args, &name, &k, &["--no-wait"], &["true"]));
                let expected = if shares(first, second) { 0 } else { 75 };
                if o.status.code() != Some(expected) {
                    wrong.push(format!("{what}: exit {:?} {}", o.status.code(), stderr(&o)));
                }
                fs::write(&go, "go").unwrap();
                assert_eq!(
                    wait_exit(&mut holder, LIVENESS),
                    0,
                    "{what}: {}",
                    b.log(&format!("{first}-{second}"))
                );
                // The first is done: the second runs.
                let o = b.sqlock(&args(second_args, &name, &k, &["--no-wait"], &["true"]));
                assert_eq!(o.status.code(), Some(0), "{what}, after: {}", stderr(&o));
            }
        }
        assert!(wrong.is_empty(), "{}: {wrong:#?}", b.name);
        // Nothing is left held.
        let o = b.sqlock(&["list", "--json"]);
        let left: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(left, serde_json::json!([]), "{}: left held", b.name);
    });
}

/// A name held by `--shared` runs shows so: `status` says it is held in shared mode by
/// two reads, with no owner, and `list` counts them in the owner's column.
#[test]
fn a_shared_name_shows_its_holders() {
    in_parallel(backends("cli_one_name_status"), |b| {
        let k = key("shown");
        let r1 = hold(&b, &["run", "--shared"], &k, &k, "r1");
        let r2 = hold(&b, &["run", "--shared"], &k, &k, "r2");
        let o = b.sqlock(&["status", &k]);
        assert_eq!(o.status.code(), Some(0), "{}: {}", b.name, stderr(&o));
        let text = common::stdout(&o);
        for want in ["held in shared mode", "read", "- (shared by 2 reads)"] {
            assert!(text.contains(want), "{}: {want:?} in {text}", b.name);
        }
        let o = b.sqlock(&["status", "--json", &k]);
        let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(
            (&json["shared"], &json["holders"], &json["owner"]),
            (&"read".into(), &2.into(), &"".into()),
            "{}: {json}",
            b.name
        );
        let o = b.sqlock(&["list"]);
        let text = common::stdout(&o);
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("{k} ")) && l.contains("- (shared by 2 reads)")),
            "{}: {text}",
            b.name
        );
        for (mut child, go) in [r1, r2] {
            fs::write(&go, "go").unwrap();
            assert_eq!(wait_exit(&mut child, LIVENESS), 0, "{}", b.name);
        }
        let o = b.sqlock(&["status", &k]);
        assert_eq!(o.status.code(), Some(75), "{}: {}", b.name, stderr(&o));
    });
}
