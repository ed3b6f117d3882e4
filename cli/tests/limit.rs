//! `sqlock run --limit N`: at most N copies of a command at once, each with a permit
//! of the semaphore KEY in its environment; a busy semaphore exits 75 with --no-wait;
//! another N, a permit's key and a bad --limit exit 64; a signal is passed on and the
//! permit given back; a killed holder's permit comes back at its TTL, no sooner, with
//! --no-presence, and at once with presence (the default); `list` shows the semaphore
//! with N and its holders.

mod common;

use std::fs;
use std::time::{Duration, Instant};

use common::{
    backends, in_parallel, key, signal, stderr, stdout, wait_exit, wait_for_line, Backend,
};
use sqlx::Connection as _;

/// A bound for what should take a TTL or less, so that a broken build fails rather
/// than hangs. Not a timing assertion.
const LIVENESS: Duration = Duration::from_secs(30);

#[test]
fn at_most_n_copies_run_and_list_shows_them() {
    in_parallel(backends("cli_limit"), |b| {
        let k = key("limit");
        let mut holders = Vec::new();
        let mut env = Vec::new();
        for i in 0..2 {
            let ready = b.path(&format!("limit-{i}.env"));
            let script = format!(
                "trap 'exit 3' TERM; echo \"$SQLOCK_KEY $SQLOCK_LIMIT $SQLOCK_PERMIT \
                 $SQLOCK_FENCING_TOKEN\" > {}; sleep 60 & wait",
                ready.display()
            );
            let log = format!("limit-{i}");
            holders.push(b.spawn(
                &log,
                &["run", "--limit", "2", &k, "--", "sh", "-c", &script],
            ));
            env.push(wait_for_line(&ready, LIVENESS));
        }
        let fields: Vec<Vec<&str>> = env.iter().map(|e| e.split_whitespace().collect()).collect();
        for f in &fields {
            assert_eq!(f.len(), 4, "{}: {f:?}", b.name);
            assert_eq!((f[0], f[1]), (k.as_str(), "2"), "{}", b.name);
            assert!(
                f[2].starts_with(&format!("semaphore:{k}#")),
                "{}: {f:?}",
                b.name
            );
            assert!(f[3].parse::<i64>().unwrap() > 0);
        }
        assert_ne!(
            fields[0][2], fields[1][2],
            "{}: two permits, two slots",
            b.name
        );

        // A third copy: busy.
        let o = b.sqlock(&["run", "--limit", "2", "--no-wait", &k, "--", "true"]);
        assert_eq!(o.status.code(), Some(75), "{}: {}", b.name, stderr(&o));
        let o = b.sqlock(&["run", "--limit", "2", "--wait", "100ms", &k, "--", "true"]);
        assert_eq!(o.status.code(), Some(75), "{}: {}", b.name, stderr(&o));
        // Another N: refused, whether permits are free or not.
        let o = b.sqlock(&["run", "--limit", "3", "--no-wait", &k, "--", "true"]);
        assert_eq!(o.status.code(), Some(64), "{}: {}", b.name, stderr(&o));
        assert!(
            stderr(&o).contains("has 2 permits, not 3"),
            "{}",
            stderr(&o)
        );

        // The list: in JSON, the permits as locks with their semaphore; in text, the
        // semaphore with N, how many are held, and its holders.
        let o = b.sqlock(&["list", "--json"]);
        assert!(o.status.success(), "{}: {}", b.name, stderr(&o));
        let all: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let permits: Vec<&serde_json::Value> = all
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["semaphore"] == k.as_str())
            .collect();
        assert_eq!(permits.len(), 2, "{}: {all}", b.name);
        assert!(
            permits.iter().all(|p| p["permits"] == 2),
            "{}: {all}",
            b.name
        );
        let o = b.sqlock(&["list"]);
        let text = stdout(&o);
        let line = text
            .lines()
            .find(|l| l.starts_with(&k))
            .unwrap_or_else(|| panic!("{}: no line for the semaphore: {text}", b.name));
        assert_eq!(
            line.split_whitespace().collect::<Vec<_>>(),
            [k.as_str(), "2", "2"],
            "{}: {text}",
            b.name
        );
        assert!(
            text.contains(fields[0][2]) && text.contains(fields[1][2]),
            "{text}"
        );

        // A signal is passed on, and the permit given back.
        signal(holders[0].id(), "TERM");
        let code = wait_exit(&mut holders[0], LIVENESS);
        assert_eq!(code, 3, "{}: {}", b.name, b.log("limit-0"));
        let o = b.sqlock(&["run", "--limit", "2", "--no-wait", &k, "--", "true"]);
        assert_eq!(o.status.code(), Some(0), "{}: {}", b.name, stderr(&o));
        signal(holders[1].id(), "TERM");
        assert_eq!(wait_exit(&mut holders[1], LIVENESS), 3, "{}", b.name);
    });
}

/// A row of the lock table as it is, expired or not, with the database clock: times in
/// microseconds since the epoch.
#[derive(Debug)]
struct Row {
    owner: String,
    token: i64,
    locked: bool,
    acquired_us: i64,
    expires_us: i64,
    now_us: i64,
}

/// The row of `key` in the backend's table, whatever its state; `None` when there is
/// none.
fn row(b: &Backend, key: &str) -> Option<Row> {
    type Raw = (String, i64, i64, i64, i64, i64);
    let t = &b.table;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let raw: Option<Raw> = runtime.block_on(async {
        match b.name {
            "postgres" => {
                let sql = format!(
                    r#"SELECT lock_owner, fencing_token, CASE WHEN locked THEN 1 ELSE 0 END::BIGINT,
                       (extract(epoch FROM acquired_at) * 1000000)::BIGINT,
                       (extract(epoch FROM expires_at) * 1000000)::BIGINT,
                       (extract(epoch FROM statement_timestamp()) * 1000000)::BIGINT
                       FROM "{t}" WHERE lock_key = $1"#
                );
                let mut c = sqlx::PgConnection::connect(&b.url).await?;
                let r = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                    .bind(key)
                    .fetch_optional(&mut c)
                    .await?;
                c.close().await?;
                Ok::<_, sqlx::Error>(r)
            }
            "mysql" => {
                let sql = format!(
                    "SELECT lock_owner, fencing_token, CAST(locked AS SIGNED),
                     TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', acquired_at),
                     TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', expires_at),
                     TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))
                     FROM `{t}` WHERE lock_key = ?"
                );
                let mut c = sqlx::MySqlConnection::connect(&b.url).await?;
                let r = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                    .bind(key)
                    .fetch_optional(&mut c)
                    .await?;
                c.close().await?;
                Ok(r)
            }
            _ => {
                let sql = format!(
                    r#"SELECT lock_owner, fencing_token, CAST(locked AS INTEGER), acquired_at,
                       expires_at, CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
                       FROM "{t}" WHERE lock_key = ?"#
                );
                let mut c = sqlx::SqliteConnection::connect(&b.url).await?;
                let r = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                    .bind(key)
                    .fetch_optional(&mut c)
                    .await?;
                c.close().await?;
                Ok(r)
            }
        }
    })
    .unwrap_or_else(|e| panic!("{}: reading the row of {key}: {e}", b.name));
    raw.map(
        |(owner, token, locked, acquired_us, expires_us, now_us)| Row {
            owner,
            token,
            locked: locked != 0,
            acquired_us,
            expires_us,
            now_us,
        },
    )
}

/// A killed copy's permit comes back at its expiry, and no sooner: right after the
/// kill its row is read from the table (nobody else tries meanwhile), still its own,
/// with its final expiry on the database clock, no further than the TTL away; the next
/// copy is granted the permit at or after that expiry on the same clock (its row,
/// read while it runs).
#[test]
fn a_killed_copy_gives_its_permit_back_at_its_ttl() {
    in_parallel(backends("cli_limit_kill"), |b| {
        let k = key("limit-kill");
        let ready = b.path("kill.token");
        let script = format!(
            "echo \"$SQLOCK_FENCING_TOKEN $SQLOCK_OWNER $SQLOCK_PERMIT\" > {}; exec sleep 60",
            ready.display()
        );
        let mut holder = b.spawn(
            "kill-holder",
            &[
                "run",
                "--limit",
                "1",
                "--ttl",
                "2s",
                "--no-presence",
                &k,
                "--",
                "sh",
                "-c",
                &script,
            ],
        );
        let said = wait_for_line(&ready, LIVENESS);
        let f: Vec<&str> = said.split_whitespace().collect();
        assert_eq!(f.len(), 3, "{}: {said}", b.name);
        let (token, owner, permit) = (f[0].parse::<i64>().unwrap(), f[1], f[2]);
        let o = b.sqlock(&["run", "--limit", "1", "--no-wait", &k, "--", "true"]);
        assert_eq!(o.status.code(), Some(75), "{}: {}", b.name, stderr(&o));
        signal(holder.id(), "KILL");
        assert_eq!(wait_exit(&mut holder, LIVENESS), -1, "{}: killed", b.name);
        // Its permit's row now that nothing renews it: still its own, and lapsing
        // within its TTL, on the database clock.
        let dead = row(&b, permit)
            .unwrap_or_else(|| panic!("{}: the killed copy's row of {permit} is gone", b.name));
        assert!(
            dead.locked && dead.owner == owner && dead.token == token,
            "{}: the killed copy's row is no longer its own ({owner}, token {token}): {dead:?}",
            b.name
        );
        assert!(
            dead.expires_us <= dead.now_us + 2_000_000,
            "{}: the killed copy's permit lasts beyond its TTL: {dead:?}",
            b.name
        );
        // The next copy gets it, and holds it until told to finish.
        let next = b.path("next.token");
        let done = b.path("next.done");
        let script = format!(
            "echo \"$SQLOCK_FENCING_TOKEN $SQLOCK_OWNER\" > {}; i=0; \
             while [ ! -e {} ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done",
            next.display(),
            done.display()
        );
        let mut copy = b.spawn(
            "kill-next",
            &[
                "run", "--limit", "1", "--wait", "30s", &k, "--", "sh", "-c", &script,
            ],
        );
        let said = wait_for_line(&next, LIVENESS);
        let f: Vec<&str> = said.split_whitespace().collect();
        assert_eq!(f.len(), 2, "{}: {said}", b.name);
        let (after, new_owner) = (f[0].parse::<i64>().unwrap(), f[1]);
        assert!(after > token, "{}: {after} after {token}", b.name);
        // Granted at or after the killed copy's expiry, on the database clock.
        let taken = row(&b, permit)
            .unwrap_or_else(|| panic!("{}: the next copy's row of {permit} is gone", b.name));
        assert!(
            taken.locked && taken.owner == new_owner && taken.token == after,
            "{}: the permit is not the next copy's ({new_owner}, token {after}): {taken:?}",
            b.name
        );
        assert!(
            taken.acquired_us >= dead.expires_us,
            "{}: the permit was taken again at {} µs, before the killed copy's expiry at {} \
             µs",
            b.name,
            taken.acquired_us,
            dead.expires_us
        );
        fs::write(&done, "done\n").unwrap();
        assert_eq!(
            wait_exit(&mut copy, LIVENESS),
            0,
            "{}: {}",
            b.name,
            b.log("kill-next")
        );
    });
}

/// With presence (the default), a SIGKILLed copy's permit is the next copy's at once:
/// at the default TTL (30 s), the next copy's grant, read from its row while it runs,
/// comes before the killed copy's permit would have expired, with a higher token. The
/// time from the kill to the next copy's command, start-up included, is printed.
#[test]
fn a_killed_copy_with_presence_leaves_its_permit_to_the_next_at_once() {
    in_parallel(backends("cli_limit_presence"), |b| {
        let k = key("limit-presence");
        let ready = b.path("kill.token");
        let script = format!(
            "echo \"$SQLOCK_FENCING_TOKEN $SQLOCK_OWNER $SQLOCK_PERMIT\" > {}; exec sleep 300",
            ready.display()
        );
        let mut holder = b.spawn(
            "presence-holder",
            &["run", "--limit", "1", &k, "--", "sh", "-c", &script],
        );
        let said = wait_for_line(&ready, LIVENESS);
        let f: Vec<&str> = said.split_whitespace().collect();
        assert_eq!(f.len(), 3, "{}: {said}", b.name);
        let (token, owner, permit) = (f[0].parse::<i64>().unwrap(), f[1], f[2]);
        let dead = row(&b, permit)
            .unwrap_or_else(|| panic!("{}: the holder's row of {permit} is missing", b.name));
        assert!(
            dead.locked && dead.owner == owner && dead.token == token,
            "{}: {dead:?}",
            b.name
        );
        // The sqlock process, not its command: nothing gives the permit back.
        signal(holder.id(), "KILL");
        let killed = Instant::now();
        assert_eq!(wait_exit(&mut holder, LIVENESS), -1, "{}: killed", b.name);
        let next = b.path("next.token");
        let script = format!(
            "echo \"$SQLOCK_FENCING_TOKEN $SQLOCK_OWNER\" > {}",
            next.display()
        );
        let o = b.sqlock(&[
            "run", "--limit", "1", "--wait", "30s", &k, "--", "sh", "-c", &script,
        ]);
        assert!(o.status.success(), "{}: {}", b.name, stderr(&o));
        let said = fs::read_to_string(&next).unwrap();
        println!(
            "{}: a SIGKILLed `sqlock run --limit 1` (default TTL) was followed by the next \
             copy, done {:?} after the kill, start-up included",
            b.name,
            killed.elapsed()
        );
        let f: Vec<&str> = said.split_whitespace().collect();
        assert_eq!(f.len(), 2, "{}: {said}", b.name);
        let (after, new_owner) = (f[0].parse::<i64>().unwrap(), f[1]);
        assert!(after > token, "{}: {after} after {token}", b.name);
        let taken =
            row(&b, permit).unwrap_or_else(|| panic!("{}: the row of {permit} is gone", b.name));
        assert_eq!(taken.token, after, "{}: {taken:?}", b.name);
        assert_ne!(new_owner, owner, "{}", b.name);
        assert!(
            taken.acquired_us < dead.expires_us,
            "{}: the permit was taken at {} µs only, after the killed copy's expiry at {} µs",
            b.name,
            taken.acquired_us,
            dead.expires_us
        );
    });
}

#[test]
fn bad_limits_and_permit_keys_exit_64() {
    in_parallel(backends("cli_limit_bad"), |b| {
        for args in [
            vec!["run", "--limit", "0", "k", "--", "true"],
            vec!["run", "--limit", "1001", "k", "--", "true"],
            vec!["run", "--limit", "x", "k", "--", "true"],
            vec!["run", "--limit", "2", "--fair", "k", "--", "true"],
            vec![
                "run",
                "--limit",
                "2",
                "--strategy",
                "insert",
                "k",
                "--",
                "true",
            ],
            vec!["run", "--limit", "2", "--at-least", "1s", "k", "--", "true"],
            vec!["run", "semaphore:k#0", "--", "true"],
        ] {
            let o = b.sqlock(&args);
            assert_eq!(
                o.status.code(),
                Some(64),
                "{} {args:?}: {}",
                b.name,
                stderr(&o)
            );
        }
        let long = "n".repeat(250);
        let o = b.sqlock(&["run", "--limit", "2", &long, "--", "true"]);
        assert_eq!(o.status.code(), Some(64), "{}: {}", b.name, stderr(&o));
    });
}
