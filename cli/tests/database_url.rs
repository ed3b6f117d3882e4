//! Where `sqlock` finds its database: `--database-url`, else `SQLOCK_DATABASE_URL`,
//! else `DATABASE_URL`, else the default file, one per user wherever the tool is
//! started (`$HOME/.local/state/sqlock/sqlock.db`, `/var/lib/sqlock/sqlock.db` for
//! root), created on first use with its lock table and no `migrate` needed. SQLite
//! files only: which file a run created tells which URL it used.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{scratch_dir, stderr, stdout, BIN};

/// `sqlock ARGS...` in `dir`, with exactly the URL variables given in `env`.
fn sqlock_in(dir: &Path, env: &[(&str, String)], args: &[&str]) -> Output {
    let mut c = Command::new(BIN);
    c.current_dir(dir)
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("SQLOCK_DATABASE_URL");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("sqlock runs")
}

fn url(dir: &Path, file: &str) -> String {
    format!("sqlite://{}", dir.join(file).display())
}

/// The default database of this test's user with `HOME` at `home`, as the tool finds it.
fn default_file(home: &Path) -> PathBuf {
    sqlock_cli::default_database(nix::unistd::geteuid().is_root(), Some(home))
        .expect("a default database")
}

/// A key no other run of these tests uses: the default database is the user's own.
fn unique_key(what: &str) -> String {
    format!("url-{what}-{}-{}", std::process::id(), uuid_like())
}

fn uuid_like() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

#[test]
fn the_embedded_default_needs_no_set_up() {
    let dir = scratch_dir("url_default");
    let home = [("HOME", dir.display().to_string())];
    let key = unique_key("default");
    let o = sqlock_in(&dir, &home, &["run", &key, "--", "true"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let file = default_file(&dir);
    assert!(
        file.exists(),
        "the default database {} was not made",
        file.display()
    );
    assert!(
        !dir.join("sqlock.db").exists(),
        "a database was made in the working directory"
    );
    // The table was created on the way: the key is known there, and free.
    let o = sqlock_in(&dir, &home, &["status", "--json", &key]);
    assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
    assert!(stdout(&o).contains("\"held\":false"), "{}", stdout(&o));
}

#[test]
fn runs_started_in_different_directories_exclude_each_other() {
    let base = scratch_dir("url_two_dirs");
    let (one, two) = (base.join("one"), base.join("two"));
    std::fs::create_dir_all(&one).unwrap();
    std::fs::create_dir_all(&two).unwrap();
    // One home for both, as a user's cron job and shell have; two working directories.
    let home = [("HOME", base.display().to_string())];
    let key = unique_key("two-dirs");
    let mut holder = Command::new(BIN)
        .current_dir(&one)
        .args([
            "run",
            "--ttl",
            "30s",
            &key,
            "--",
            "sh",
            "-c",
            "echo held; read _; exit 0",
        ])
        .env_remove("DATABASE_URL")
        .env_remove("SQLOCK_DATABASE_URL")
        .env("HOME", &base)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sqlock runs");
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "held");
    let o = sqlock_in(&two, &home, &["run", "--no-wait", &key, "--", "true"]);
    assert_eq!(
        o.status.code(),
        Some(75),
        "a run in another directory got the lock: {}",
        stderr(&o)
    );
    drop(holder.stdin.take());
    assert!(holder.wait().unwrap().success());
    let o = sqlock_in(&two, &home, &["run", "--no-wait", &key, "--", "true"]);
    assert!(o.status.success(), "{}", stderr(&o));
    for dir in [&one, &two] {
        assert!(
            !dir.join("sqlock.db").exists(),
            "a database in {}",
            dir.display()
        );
    }
}

#[test]
fn the_flag_then_sqlock_database_url_then_database_url() {
    let dir = scratch_dir("url_order");
    let (generic, specific, flag) = (
        url(&dir, "generic.db"),
        url(&dir, "specific.db"),
        url(&dir, "flag.db"),
    );
    let run = |env: &[(&str, String)], extra: &[&str]| {
        let mut args: Vec<&str> = extra.to_vec();
        args.extend(["run", "k", "--", "true"]);
        let o = sqlock_in(&dir, env, &args);
        assert!(o.status.success(), "{env:?} {extra:?}: {}", stderr(&o));
    };
    let made = |file: &str| dir.join(file).exists();

    run(&[("DATABASE_URL", generic.clone())], &[]);
    assert!(
        made("generic.db") && !made("sqlock.db"),
        "DATABASE_URL was not used"
    );

    run(
        &[
            ("DATABASE_URL", generic.clone()),
            ("SQLOCK_DATABASE_URL", specific.clone()),
        ],
        &[],
    );
    assert!(
        made("specific.db"),
        "SQLOCK_DATABASE_URL did not win over DATABASE_URL"
    );

    run(
        &[("DATABASE_URL", generic), ("SQLOCK_DATABASE_URL", specific)],
        &["--database-url", &flag],
    );
    assert!(
        made("flag.db"),
        "--database-url did not win over the environment"
    );
    assert!(
        !made("sqlock.db"),
        "the default was used although a URL was given"
    );
}

/// Runs started together on one file, the first of which creates it, all get in: a
/// file met busy while another process opens it (switching it to WAL, recovering its
/// WAL) is opened again, not refused. Cron jobs of the same minute start so.
#[test]
fn runs_started_together_on_one_new_file_all_get_in() {
    for round in 0..3 {
        let dir = scratch_dir(&format!("url_together_{round}"));
        let file = url(&dir, "together.db");
        let runs: Vec<_> = (0..8)
            .map(|i| {
                Command::new(BIN)
                    .current_dir(&dir)
                    .args([
                        "run",
                        "--database-url",
                        &file,
                        &format!("together-{i}"),
                        "--",
                        "true",
                    ])
                    .env_remove("DATABASE_URL")
                    .env_remove("SQLOCK_DATABASE_URL")
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("sqlock starts")
            })
            .collect();
        for run in runs {
            let o = run.wait_with_output().expect("sqlock ends");
            assert!(o.status.success(), "round {round}: {}", stderr(&o));
        }
    }
}
