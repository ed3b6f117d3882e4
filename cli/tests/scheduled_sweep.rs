//! `sqlock sweep --schedule` and `--unschedule`: the sweep scheduled inside the
//! database (pg_cron, a MariaDB event) on the fault tests' own server instances
//! (`scripts/fault-db.sh`), which have a scheduler; the library's tests show the
//! scheduled sweep reclaiming rows. Where there is no scheduler the tool exits 69 and
//! says what to use or set; an interval no scheduler keeps is a usage error, 64.

mod common;

use common::{stderr, stdout, Backend};

/// The fault tests' own PostgreSQL and MariaDB, each with `table` migrated anew.
fn fault_servers(table: &str) -> Vec<Backend> {
    let candidates = vec![
        (
            "postgres",
            std::env::var("SQLOCK_TEST_FAULT_POSTGRES_URL")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5433/test".into()),
        ),
        (
            "mysql",
            std::env::var("SQLOCK_TEST_FAULT_MYSQL_URL")
                .unwrap_or_else(|_| "mysql://root@127.0.0.1:3307/test".into()),
        ),
    ];
    common::backends_at(table, common::scratch_dir(table), candidates)
}

#[test]
fn schedule_and_unschedule_the_sweep_inside_the_database() {
    for b in fault_servers("cli_sched") {
        // Left by an interrupted earlier run, if any.
        assert!(b.sqlock(&["sweep", "--unschedule"]).status.success());
        let every = if b.name == "postgres" { "5m" } else { "30s" };
        let o = b.sqlock(&[
            "sweep",
            "--schedule",
            every,
            "--grace",
            "1m",
            "--batch",
            "500",
        ]);
        assert!(o.status.success(), "{}: {}", b.name, stderr(&o));
        let out = stdout(&o);
        let want = if b.name == "postgres" {
            "scheduled pg_cron job cli_sched_sweep (id "
        } else {
            "scheduled event cli_sched_sweep EVERY 30 SECOND"
        };
        assert!(out.contains(want), "{}: {out}", b.name);
        if b.name == "postgres" {
            assert!(out.contains("\"*/5 * * * *\""), "{out}");
        }

        // Scheduling again replaces the schedule: one removal removes it.
        let again = b.sqlock(&["sweep", "--schedule", every]);
        assert!(again.status.success(), "{}: {}", b.name, stderr(&again));
        let removed = b.sqlock(&["sweep", "--unschedule"]);
        assert!(removed.status.success(), "{}: {}", b.name, stderr(&removed));
        assert!(
            stdout(&removed).contains("removed the scheduled sweep"),
            "{}: {}",
            b.name,
            stdout(&removed)
        );
        let none = b.sqlock(&["sweep", "--unschedule"]);
        assert!(
            stdout(&none).contains("no sweep was scheduled"),
            "{}: {}",
            b.name,
            stdout(&none)
        );

        // An interval the scheduler cannot keep is a usage error.
        let bad = if b.name == "postgres" {
            "90s"
        } else {
            "1500ms"
        };
        let o = b.sqlock(&["sweep", "--schedule", bad]);
        assert_eq!(o.status.code(), Some(64), "{}: {}", b.name, stderr(&o));
        assert!(
            stderr(&o).contains("cannot schedule a sweep"),
            "{}",
            stderr(&o)
        );
    }
}

#[test]
fn without_a_scheduler_the_tool_says_what_to_use() {
    let dir = common::scratch_dir("cli_sched_sqlite");
    let b = Backend {
        name: "sqlite",
        url: format!("sqlite://{}", dir.join("locks.db").display()),
        table: "cli_sched_sqlite".into(),
        dir,
    };
    assert!(b.sqlock(&["migrate"]).status.success());
    let o = b.sqlock(&["sweep", "--schedule", "1m"]);
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("spawn_sweeper") && stderr(&o).contains("from cron"),
        "{}",
        stderr(&o)
    );
    // --every sweeps from this process; --schedule leaves it to the database.
    let o = b.sqlock(&["sweep", "--every", "1m", "--schedule", "1m"]);
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
}

#[test]
fn a_table_migrated_by_an_earlier_version_is_told_to_migrate() {
    for b in fault_servers("cli_sched_old") {
        // The procedure dropped: as a table created before it existed.
        let drop = if b.name == "postgres" {
            format!(r#"DROP PROCEDURE "{}_sweep""#, b.table)
        } else {
            format!("DROP PROCEDURE `{}_sweep`", b.table)
        };
        run_sql(&b, &drop);
        let every = if b.name == "postgres" { "1m" } else { "1s" };
        let o = b.sqlock(&["sweep", "--schedule", every]);
        assert_eq!(o.status.code(), Some(69), "{}: {}", b.name, stderr(&o));
        assert!(stderr(&o).contains("sqlock migrate"), "{}", stderr(&o));
        let migrated = b.sqlock(&["migrate"]);
        assert!(migrated.status.success());
        let o = b.sqlock(&["sweep", "--schedule", every]);
        assert!(o.status.success(), "{}: {}", b.name, stderr(&o));
        assert!(b.sqlock(&["sweep", "--unschedule"]).status.success());
    }
}

/// One statement on `b`'s database (test set-up only).
fn run_sql(b: &Backend, sql: &str) {
    use sqlx::Connection as _;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        if b.name == "postgres" {
            let mut c = sqlx::PgConnection::connect(&b.url).await.unwrap();
            sqlx::raw_sql(sql).execute(&mut c).await.unwrap();
        } else {
            let mut c = sqlx::MySqlConnection::connect(&b.url).await.unwrap();
            sqlx::raw_sql(sql).execute(&mut c).await.unwrap();
        }
    });
}
