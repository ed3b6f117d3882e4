//! `sqlock run` given `--database-url` three times: the command runs under a quorum
//! lock of those databases (a SQLite file, PostgreSQL and MariaDB; three SQLite files
//! without servers), with the quorum's fencing token and how many databases hold it in
//! its environment. Busy on a majority exits 75; one database down still runs, two
//! exit 69; two URLs, a quorum `list` and a quorum `--limit` exit 64.

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::{backends, backends_at, key, scratch_dir, stderr, stdout, wait_exit, Backend, BIN};

/// A bound for what should take far less, so that a broken build fails rather than
/// hangs. Not a timing assertion.
const LIVENESS: Duration = Duration::from_secs(30);

/// Three databases with the test's table: SQLite, PostgreSQL and MariaDB, or three
/// SQLite files where the servers are left out.
fn three(table: &str) -> Vec<Backend> {
    let all = backends(table);
    if all.len() == 3 {
        return all;
    }
    let dir = scratch_dir(&format!("{table}_files"));
    let files = (0..3)
        .map(|i| {
            (
                "sqlite",
                format!("sqlite://{}", dir.join(format!("locks{i}.db")).display()),
            )
        })
        .collect();
    backends_at(table, dir, files)
}

/// A PostgreSQL URL on a loopback port nothing listens on: a database that is down.
fn down() -> String {
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    format!("postgres://postgres@127.0.0.1:{port}/test")
}

/// `sqlock --database-url U1 --database-url U2 ... --table TABLE ARGS...`.
fn quorum(urls: &[String], table: &str, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    for url in urls {
        c.arg("--database-url").arg(url);
    }
    c.arg("--table")
        .arg(table)
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("SQLOCK_DATABASE_URL");
    c
}

fn output(mut c: Command) -> Output {
    c.output().expect("sqlock runs")
}

fn urls(dbs: &[Backend]) -> Vec<String> {
    dbs.iter().map(|b| b.url.clone()).collect()
}

const SHOW: &str = "echo $SQLOCK_FENCING_TOKEN $SQLOCK_QUORUM";

#[test]
fn a_command_runs_under_the_quorum_with_a_rising_token() {
    let dbs = three("cli_quorum_run");
    let (urls, table, k) = (urls(&dbs), &dbs[0].table, key("quorum-run"));
    let mut tokens = Vec::new();
    for _ in 0..2 {
        let o = output(quorum(&urls, table, &["run", &k, "--", "sh", "-c", SHOW]));
        assert!(o.status.success(), "{}", stderr(&o));
        let out = stdout(&o);
        let mut words = out.split_whitespace();
        tokens.push(words.next().unwrap().parse::<i64>().unwrap());
        assert_eq!(words.next(), Some("3/3"), "{out}");
    }
    assert!(tokens[0] < tokens[1], "{tokens:?}");
}

#[test]
fn busy_on_a_majority_exits_75() {
    let dbs = three("cli_quorum_busy");
    let (urls, table, k) = (urls(&dbs), &dbs[0].table, key("quorum-busy"));
    let ready = dbs[0].path("ready");
    let script = format!("touch {}; sleep 4", ready.display());
    let mut holder = quorum(&urls, table, &["run", &k, "--", "sh", "-c", &script])
        .spawn()
        .expect("sqlock starts");
    let started = std::time::Instant::now();
    while !ready.exists() {
        assert!(started.elapsed() < LIVENESS, "the holder never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = output(quorum(
        &urls,
        table,
        &["run", "--no-wait", &k, "--", "true"],
    ));
    assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
    assert!(stderr(&o).contains("majority"), "{}", stderr(&o));
    assert_eq!(wait_exit(&mut holder, LIVENESS), 0);
    // Free again once the holder is done.
    let o = output(quorum(
        &urls,
        table,
        &["run", "--no-wait", &k, "--", "true"],
    ));
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn one_database_down_still_runs_and_two_exit_69() {
    let dbs = three("cli_quorum_down");
    let table = &dbs[0].table;
    let k = key("quorum-down");
    let mut two_up = urls(&dbs[..2]);
    two_up.push(down());
    let o = output(quorum(&two_up, table, &["run", &k, "--", "sh", "-c", SHOW]));
    assert!(o.status.success(), "{}", stderr(&o));
    // The fault took: the third database holds no part of it.
    assert!(stdout(&o).trim().ends_with("2/3"), "{}", stdout(&o));
    assert!(stderr(&o).contains("goes on without it"), "{}", stderr(&o));

    let mut one_up = urls(&dbs[..1]);
    one_up.push(down());
    one_up.push(down());
    let o = output(quorum(
        &one_up,
        table,
        &["run", "--wait", "1s", &k, "--", "true"],
    ));
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("1 of its 3 databases answered"),
        "{}",
        stderr(&o)
    );
    // Nothing left held on the database that answered.
    let o = dbs[0].sqlock(&["run", "--no-wait", &k, "--", "true"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn what_a_quorum_does_not_take_exits_64_before_connecting() {
    // Nothing listens on these: a connection attempt would fail otherwise than 64.
    let three_down = vec![down(), down(), down()];
    let k = key("quorum-usage");
    let two = output(quorum(&three_down[..2], "t", &["run", &k, "--", "true"]));
    assert_eq!(two.status.code(), Some(64), "{}", stderr(&two));
    assert!(stderr(&two).contains("at least 3"), "{}", stderr(&two));
    let list = output(quorum(&three_down, "t", &["list"]));
    assert_eq!(list.status.code(), Some(64), "{}", stderr(&list));
    for extra in [&["--limit", "2"][..], &["--shared"], &["--fair"]] {
        let mut args = vec!["run"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[&k, "--", "true"]);
        let o = output(quorum(&three_down, "t", &args));
        assert_eq!(o.status.code(), Some(64), "{extra:?}: {}", stderr(&o));
    }
}
