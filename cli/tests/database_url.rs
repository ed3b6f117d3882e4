//! Where `sqlock` finds its database: `--database-url`, else `SQLOCK_DATABASE_URL`,
//! else `DATABASE_URL`, else `sqlite:sqlock.db` in the working directory, created on
//! first use with its lock table and no `migrate` needed. SQLite files only: which
//! file a run created tells which URL it used.

mod common;

use std::path::Path;
use std::process::{Command, Output};

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

#[test]
fn the_embedded_default_needs_no_set_up() {
    let dir = scratch_dir("url_default");
    let o = sqlock_in(&dir, &[], &["run", "job", "--", "true"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        dir.join("sqlock.db").exists(),
        "the default database was not created"
    );
    // The table was created on the way: listing works, and finds nothing held.
    let o = sqlock_in(&dir, &[], &["list", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), "[]");
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
