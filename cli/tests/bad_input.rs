//! Scenario 5, the failures: every bad input exits 64 with a message on stderr, and a
//! missing table or an unreachable server exits 69.

mod common;

use std::process::Command;

use common::{backends, stderr, Backend, BIN};

#[test]
fn bad_input_exits_64_with_a_message() {
    let long = "k".repeat(256);
    let cases: Vec<Vec<&str>> = vec![
        vec!["run", "", "--", "true"],
        vec!["run", &long, "--", "true"],
        vec!["run", "--ttl", "0s", "k", "--", "true"],
        vec!["run", "--ttl", "banana", "k", "--", "true"],
        vec!["run", "--wait", "1x", "k", "--", "true"],
        vec!["run", "--strategy", "optimistic", "k", "--", "true"],
        vec!["run", "--wait", "1s", "--no-wait", "k", "--", "true"],
        vec!["run", "k"],
        vec!["run", "--bogus", "k", "--", "true"],
        vec!["--table", "Bad-Name", "list"],
        vec!["frobnicate"],
        vec![],
        vec!["release", "k"],
        vec!["release", "--force", ""],
        vec!["sweep", "--batch", "0"],
        vec!["sweep", "--every", "soon"],
        vec!["schema", "--dialect", "oracle"],
    ];
    for b in backends("cli_bad") {
        for args in &cases {
            let o = b.sqlock(args);
            assert_eq!(
                o.status.code(),
                Some(64),
                "{} {args:?}: {}",
                b.name,
                stderr(&o)
            );
            assert!(
                stderr(&o).starts_with("sqlock: "),
                "{} {args:?}: {}",
                b.name,
                stderr(&o)
            );
        }
        if b.name == "sqlite" {
            let o = b.sqlock(&["run", "--strategy", "for-update", "k", "--", "true"]);
            assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
        }
    }
    let o = Command::new(BIN)
        .args(["--database-url", "oracle://db/x", "list"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
    for help in [&["--help"][..], &["run", "--help"], &["--version"]] {
        let o = Command::new(BIN).args(help).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{help:?}");
        assert!(!o.stdout.is_empty(), "{help:?}");
    }
}

#[test]
fn unreachable_servers_and_missing_tables_exit_69() {
    for url in [
        "postgres://postgres@127.0.0.1:1/test",
        "mysql://root@127.0.0.1:1/test",
    ] {
        for args in [&["list"][..], &["run", "k", "--", "true"], &["migrate"]] {
            let o = Command::new(BIN)
                .args(["--database-url", url])
                .args(args)
                .output()
                .unwrap();
            assert_eq!(o.status.code(), Some(69), "{url} {args:?}: {}", stderr(&o));
            assert!(stderr(&o).contains("cannot connect"), "{}", stderr(&o));
        }
    }
    for server in backends("cli_missing_probe")
        .into_iter()
        .filter(|b| b.name != "sqlite")
    {
        let missing = Backend {
            table: "cli_never_created".into(),
            ..server
        };
        common::drop_table(&missing).unwrap();
        for args in [
            &["list"][..],
            &["run", "k", "--", "true"],
            &["sweep"],
            &["release", "--force", "k"],
        ] {
            let o = missing.sqlock(args);
            assert_eq!(
                o.status.code(),
                Some(69),
                "{} {args:?}: {}",
                missing.name,
                stderr(&o)
            );
            assert!(
                stderr(&o).contains("sqlock --table cli_never_created migrate"),
                "{}",
                stderr(&o)
            );
        }
    }
}
