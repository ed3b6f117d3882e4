//! `sqlock run` given `--database-url` three times: the command runs under a quorum
//! lock of those databases (a SQLite file, PostgreSQL and MariaDB; three SQLite files
//! without servers), with the quorum's fencing token and how many databases hold it in
//! its environment. Busy on a majority exits 75; one database down still runs, two
//! exit 69; `status` and `list` show each database's view and whether a majority
//! holds the key; two URLs, a quorum `release` and a quorum `--limit` exit 64.

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
    let release = output(quorum(&three_down, "t", &["release", "--force", &k]));
    assert_eq!(release.status.code(), Some(64), "{}", stderr(&release));
    let status = output(quorum(&three_down[..2], "t", &["status", &k]));
    assert_eq!(status.status.code(), Some(64), "{}", stderr(&status));
    for extra in [&["--limit", "2"][..], &["--shared"], &["--fair"]] {
        let mut args = vec!["run"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[&k, "--", "true"]);
        let o = output(quorum(&three_down, "t", &args));
        assert_eq!(o.status.code(), Some(64), "{extra:?}: {}", stderr(&o));
    }
}

#[test]
fn status_and_list_show_each_database_view() {
    let dbs = three("cli_quorum_view");
    let (urls, table, k) = (urls(&dbs), &dbs[0].table, key("quorum-view"));
    let ready = dbs[0].path("view-ready");
    let done = dbs[0].path("view-done");
    let script = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
        ready.display(),
        done.display()
    );
    let mut holder = quorum(&urls, table, &["run", &k, "--", "sh", "-c", &script])
        .spawn()
        .expect("sqlock starts");
    // A failed assertion lets the holder finish too, rather than leave it running.
    struct Finish(std::path::PathBuf);
    impl Drop for Finish {
        fn drop(&mut self) {
            let _ = std::fs::write(&self.0, b"");
        }
    }
    let finish = Finish(done.clone());
    let started = std::time::Instant::now();
    while !ready.exists() {
        assert!(started.elapsed() < LIVENESS, "the holder never ran");
        std::thread::sleep(Duration::from_millis(20));
    }

    // Held on all three: each database says so, and so does the summary.
    let o = output(quorum(&urls, table, &["status", &k]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("held: live leases on 3 of 3 databases"),
        "{text}"
    );
    for i in 1..=3 {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("database {i}")))
            .unwrap_or_else(|| panic!("no line for database {i}: {text}"));
        assert!(line.contains("held by"), "{line}");
    }
    let o = output(quorum(&urls, table, &["status", "--json", &k]));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert_eq!(v["held"], true, "{v}");
    assert_eq!(v["held_on"], 3, "{v}");
    assert_eq!(v["majority"], 2, "{v}");
    assert_eq!(v["databases"].as_array().map(Vec::len), Some(3), "{v}");
    // The quorum's token, as each database recorded it: the same on all three here,
    // and the highest of them is the run's.
    let token = v["quorum_token"].as_i64().expect("a quorum token");
    assert!(token > 0, "{v}");
    for d in v["databases"].as_array().unwrap() {
        assert_eq!(d["quorum_token"].as_i64(), Some(token), "{v}");
    }

    // One database down: still held by a majority, the third shown unreachable.
    let mut two_up = urls[..2].to_vec();
    two_up.push(down());
    let o = output(quorum(&two_up, table, &["status", &k]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("held: live leases on 2 of 3 databases"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("database 3") && l.contains("unavailable")),
        "{text}"
    );

    // list: a section per database, and the key among those a majority holds.
    let o = output(quorum(&urls, table, &["list"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    for i in 1..=3 {
        assert!(text.contains(&format!("DATABASE {i} OF 3")), "{text}");
    }
    let majority = text
        .split("LEASES HELD ON A MAJORITY")
        .nth(1)
        .expect("the summary");
    assert!(majority.contains(&format!("{k}  on 3 of 3")), "{text}");
    let o = output(quorum(&urls, table, &["list", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert_eq!(v["held_by_a_majority"][0]["key"], k.as_str(), "{v}");
    assert_eq!(v["databases"][0]["reachable"], true, "{v}");
    assert!(
        v["databases"][0]["locks"]
            .as_array()
            .is_some_and(|l| l.iter().any(|l| l["key"] == k.as_str())),
        "{v}"
    );

    drop(finish);
    assert_eq!(wait_exit(&mut holder, LIVENESS), 0);
    // Free: not held by a quorum (75); with two of three down, nobody can tell (69).
    let o = output(quorum(&urls, table, &["status", &k]));
    assert_eq!(o.status.code(), Some(75), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("not held by a quorum"),
        "{}",
        stdout(&o)
    );
    // A lock of another strategy on one database is no part of a quorum lock.
    let inner = format!(
        "'{BIN}' --database-url '{}' --database-url '{}' --database-url '{}' --table {table} \
         status {k}; echo rc=$?",
        urls[0], urls[1], urls[2]
    );
    let o = dbs[0].sqlock(&["run", "--strategy", "insert", &k, "--", "sh", "-c", &inner]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("rc=75"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("database 1") && l.contains("held (insert)")),
        "{text}"
    );
    let one_up = vec![urls[0].clone(), down(), down()];
    let o = output(quorum(&one_up, table, &["status", &k]));
    assert_eq!(o.status.code(), Some(69), "{}", stdout(&o));
    assert!(stdout(&o).contains("unknown"), "{}", stdout(&o));
    let o = output(quorum(&one_up, table, &["list"]));
    assert_eq!(o.status.code(), Some(69), "{}", stdout(&o));
}
