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

#[test]
fn messages_say_each_cause_once_in_the_tools_words() {
    for b in backends("cli_words") {
        // A name shorter than a key says why its limit is not the key's.
        let long = "k".repeat(250);
        let longer = "k".repeat(256);
        for (args, says) in [
            (
                vec!["run", "--shared", &long, "--", "true"],
                "KEY: a read-write lock's name",
            ),
            (
                vec!["run", "--exclusive", &long, "--", "true"],
                "KEY: a read-write lock's name",
            ),
            (
                vec!["run", "--limit", "2", &long, "--", "true"],
                "KEY: a semaphore's name",
            ),
            (
                vec!["elect", &longer, "--", "true"],
                "NAME: an election's name",
            ),
        ] {
            let o = b.sqlock(&args);
            assert_eq!(o.status.code(), Some(64), "{args:?}: {}", stderr(&o));
            let err = stderr(&o);
            assert!(
                err.starts_with(&format!("sqlock: {says}")),
                "{args:?}: {err}"
            );
            assert!(
                err.contains("within the 255 bytes of a key"),
                "{args:?}: {err}"
            );
        }
        // A command without `--` before it gets a hint.
        let o = b.sqlock(&["run", "job1", "echo", "hi"]);
        assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("hint: the command to run goes after `--`"),
            "{}",
            stderr(&o)
        );
        // A table of sqlock's name that is not sqlock's: refused by migrate, once.
        let clash = Backend {
            table: "cli_clashing".into(),
            ..b.clone()
        };
        common::drop_table(&clash).unwrap();
        common::execute_all(&clash, vec!["CREATE TABLE cli_clashing (a INT)".into()]).unwrap();
        let o = clash.sqlock(&["migrate"]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(69), "{}: {err}", b.name);
        assert!(
            err.contains("exists but is not a sqlock lock table"),
            "{}: {err}",
            b.name
        );
        assert_eq!(err.lines().count(), 1, "{}: {err}", b.name);
        common::execute_all(&clash, vec!["DROP TABLE cli_clashing".into()]).unwrap();
        common::drop_table(&clash).unwrap();
    }
    // The server's message, without its source line or error number.
    for url in [
        "postgres://postgres@127.0.0.1:5432/sqlock_no_such_database",
        "mysql://root@127.0.0.1:3306/sqlock_no_such_database",
    ] {
        let o = Command::new(BIN)
            .args(["--database-url", url, "list"])
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(69), "{url}: {err}");
        assert!(err.contains("sqlock_no_such_database"), "{url}: {err}");
        assert!(!err.contains(" at line "), "{url}: {err}");
        assert!(
            !err.contains("(42000)") && !err.contains("1049"),
            "{url}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{url}: {err}");
    }
}
