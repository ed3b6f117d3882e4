//! Presence through `sqlock run` while the holder's connections are killed on the
//! server, on PostgreSQL and MariaDB: six `sqlock run` processes (two hosts' worth of
//! three) take turns on one key with a TTL of 1 s, each running a command that notes
//! on CLOCK_MONOTONIC when it starts and when it ends (at its end, or at the SIGTERM
//! a lost lock sends it), while a killer ends, every 100 to 250 ms, the connections of
//! whichever process holds the key:
//!
//! - **the marker's connection only** (what an operator, a proxy or an idle timeout
//!   ends), while the holder's standby waits for the marker: no two commands ever
//!   run at once, and no run loses its lock. Asserted: it is a guarantee (the server
//!   hands the marker to the standby in the same step).
//! - **every connection of the holder** (its presence connections and its pool's):
//!   the marker is free until the holder opens a connection again, and another
//!   process may take the key meanwhile, even between a holder's grant and its
//!   command's start. Asserted: no token is granted twice (of two overlapping commands
//!   the holder taken over has the lower token, which a fenced write refuses). Printed:
//!   how many commands overlapped, and by how much at most, the window that remains,
//!   and how many started after their takers'.
//!
//! The commands are this test binary, run as `stamp_command` with `SQLOCK_STAMP_LOG`
//! set.

mod common;

use std::collections::HashMap;
use std::fs;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::{backends, key, Backend, BIN};

/// Where a command notes its start and end.
const STAMP_LOG: &str = "SQLOCK_STAMP_LOG";
/// Which run a command is (worker and number).
const STAMP_RUN: &str = "SQLOCK_STAMP_RUN";
/// How long a command works, in milliseconds.
const STAMP_HOLD_MS: &str = "SQLOCK_STAMP_HOLD_MS";

/// Two hosts' worth of processes.
const HOSTS: usize = 2;
const PROCESSES_PER_HOST: usize = 3;

/// How long each kind of kill goes on, per server.
const RUN_FOR: Duration = Duration::from_secs(15);

/// The lock's TTL, as in the run that first measured the window.
const TTL: &str = "1s";

/// How long each command works.
const HOLD_MS: u64 = 200;

/// CLOCK_MONOTONIC now, in nanoseconds: one clock for every process of the machine.
fn monotonic_ns() -> i64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    t.tv_sec() * 1_000_000_000 + t.tv_nsec()
}

/// The command: runs only in a process started by `sqlock run` in this test, with
/// `SQLOCK_STAMP_LOG` set. Notes its start, works, and notes its end: after its work,
/// or at once at SIGTERM (a lost lock), then exits as SIGTERM would.
#[test]
fn stamp_command() {
    let Ok(log) = std::env::var(STAMP_LOG) else {
        return;
    };
    let run = std::env::var(STAMP_RUN).unwrap_or_default();
    let token = std::env::var("SQLOCK_FENCING_TOKEN").unwrap_or_default();
    let hold = Duration::from_millis(
        std::env::var(STAMP_HOLD_MS)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(HOLD_MS),
    );
    let note = |line: String| {
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        // One write of one short line: appends land whole.
        f.write_all(line.as_bytes()).unwrap();
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let terminated = runtime.block_on(async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
        note(format!("START {run} {token} {}\n", monotonic_ns()));
        tokio::select! {
            () = tokio::time::sleep(hold) => false,
            _ = term.recv() => true,
        }
    });
    let why = if terminated { "term" } else { "done" };
    note(format!("END {run} {token} {} {why}\n", monotonic_ns()));
    if terminated {
        std::process::exit(143);
    }
}

/// Which connections the killer ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kill {
    /// The connection that holds the holder's marker, while its standby waits.
    Marker,
    /// Every connection of the holder process.
    All,
}

/// One command's run, as its notes and its `sqlock run`'s exit status tell.
#[derive(Debug, Default, Clone)]
struct Run {
    token: i64,
    start: Option<i64>,
    end: Option<i64>,
    status: Option<i32>,
}

/// What one kind of kill did on one server.
#[derive(Debug)]
struct Measured {
    runs: usize,
    kills: u64,
    /// Runs whose lock was lost (exit status 76).
    lost: usize,
    /// How long each pair of overlapping commands ran at once.
    overlaps: Vec<Duration>,
    /// Of the overlaps, how many had the earlier command's run report its lock lost.
    overlaps_lost: usize,
    /// Runs whose command started after that of a run with a higher token: granted,
    /// then taken over (every connection of theirs ended) before their command began.
    /// Their fenced writes are refused once the higher token has written.
    late_starts: usize,
}

/// The URL each worker connects with: PostgreSQL tags its connections with an
/// application_name, MariaDB gives it a user of its own, so that the killer can end
/// every connection of one process.
fn worker_url(b: &Backend, worker: usize) -> String {
    let tag = format!("sqlock_ovl_{worker}");
    match b.name {
        "postgres" => {
            let sep = if b.url.contains('?') { '&' } else { '?' };
            format!("{}{sep}application_name={tag}", b.url)
        }
        _ => b.url.replacen("://root@", &format!("://{tag}:kill@"), 1),
    }
}

async fn mysql_users(b: &Backend) {
    let mut conn = <sqlx::MySqlConnection as sqlx::Connection>::connect(&b.url)
        .await
        .unwrap();
    for worker in 0..HOSTS * PROCESSES_PER_HOST {
        let tag = format!("sqlock_ovl_{worker}");
        let sql = format!(
            "CREATE USER IF NOT EXISTS '{tag}'@'127.0.0.1' IDENTIFIED BY 'kill'; \
             GRANT ALL PRIVILEGES ON *.* TO '{tag}'@'127.0.0.1';"
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut conn)
            .await
            .unwrap();
    }
}

/// The killer: every 100 to 250 ms, ends the chosen connections of the key's holder.
/// Returns how many connections it ended.
async fn killer(b: &Backend, k: &str, kill: Kill, until: Instant) -> u64 {
    let mut kills = 0;
    let pause = |i: u64| Duration::from_millis(100 + (i * 7919) % 150);
    let mut i = 0u64;
    match b.name {
        "postgres" => {
            let pool = sqlx::PgPool::connect(&b.url).await.unwrap();
            let marker = format!(
                "SELECT presence_key FROM \"{}\" WHERE lock_key = $1 AND locked \
                 AND expires_at > clock_timestamp()",
                b.table
            );
            while Instant::now() < until {
                i += 1;
                tokio::time::sleep(pause(i)).await;
                let Ok(Some(Some(v))) =
                    sqlx::query_scalar::<_, Option<i64>>(sqlx::AssertSqlSafe(marker.clone()))
                        .bind(k)
                        .fetch_optional(&pool)
                        .await
                else {
                    continue;
                };
                let rows: Vec<(i32, bool, Option<String>)> = sqlx::query_as(
                    "SELECT l.pid, l.granted, a.application_name FROM pg_locks AS l \
                     JOIN pg_stat_activity AS a ON a.pid = l.pid \
                     WHERE l.locktype = 'advisory' AND l.classid = 1936813168 \
                     AND l.objid = $1 AND l.objsubid = 2",
                )
                .bind(v & 0x7fff_ffff)
                .fetch_all(&pool)
                .await
                .unwrap_or_default();
                let Some((holder, _, app)) = rows.iter().find(|r| r.1).cloned() else {
                    continue;
                };
                match kill {
                    Kill::Marker => {
                        if rows.iter().any(|r| !r.1) {
                            let _ = sqlx::query("SELECT pg_terminate_backend($1)")
                                .bind(holder)
                                .execute(&pool)
                                .await;
                            kills += 1;
                        }
                    }
                    Kill::All => {
                        let ended: i64 = sqlx::query_scalar(
                            "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(pid) AS ended \
                             FROM pg_stat_activity WHERE application_name = $1 \
                             AND pid <> pg_backend_pid()) AS t WHERE ended",
                        )
                        .bind(app.unwrap_or_default())
                        .fetch_one(&pool)
                        .await
                        .unwrap_or(0);
                        kills += u64::try_from(ended).unwrap_or(0);
                    }
                }
            }
        }
        _ => {
            let pool = sqlx::MySqlPool::connect(&b.url).await.unwrap();
            let marker = format!(
                "SELECT presence_key FROM `{}` WHERE lock_key = ? AND locked \
                 AND expires_at > UTC_TIMESTAMP(6)",
                b.table
            );
            while Instant::now() < until {
                i += 1;
                tokio::time::sleep(pause(i)).await;
                let Ok(Some(Some(name))) =
                    sqlx::query_scalar::<_, Option<String>>(sqlx::AssertSqlSafe(marker.clone()))
                        .bind(k)
                        .fetch_optional(&pool)
                        .await
                else {
                    continue;
                };
                let holder: Option<(i64, String)> = sqlx::query_as(
                    "SELECT CAST(ID AS SIGNED), USER FROM information_schema.PROCESSLIST \
                     WHERE ID = IS_USED_LOCK(?)",
                )
                .bind(&name)
                .fetch_optional(&pool)
                .await
                .unwrap_or(None);
                let Some((holder, user)) = holder else {
                    continue;
                };
                let of_user: Vec<(i64, Option<String>)> = sqlx::query_as(
                    "SELECT CAST(ID AS SIGNED), STATE FROM information_schema.PROCESSLIST \
                     WHERE USER = ?",
                )
                .bind(&user)
                .fetch_all(&pool)
                .await
                .unwrap_or_default();
                let targets: Vec<i64> = match kill {
                    Kill::Marker => {
                        let waits = of_user
                            .iter()
                            .any(|(_, state)| state.as_deref() == Some("User lock"));
                        if waits {
                            vec![holder]
                        } else {
                            Vec::new()
                        }
                    }
                    Kill::All => of_user.iter().map(|(id, _)| *id).collect(),
                };
                for id in targets {
                    let kill = format!("KILL CONNECTION {id}");
                    if sqlx::raw_sql(sqlx::AssertSqlSafe(kill))
                        .execute(&pool)
                        .await
                        .is_ok()
                    {
                        kills += 1;
                    }
                }
            }
        }
    }
    kills
}

/// One kind of kill on one server: the workers and the killer for [`RUN_FOR`], then
/// what the commands' notes and statuses say.
fn measure(b: &Backend, kill: Kill) -> Measured {
    let k = key(&format!("kills-{kill:?}"));
    let log = b.path(&format!("stamps-{kill:?}.log"));
    let _ = fs::remove_file(&log);
    let until = Instant::now() + RUN_FOR;
    let statuses: Arc<Mutex<HashMap<String, i32>>> = Arc::default();
    let test_exe = std::env::current_exe().unwrap();
    let workers: Vec<_> = (0..HOSTS * PROCESSES_PER_HOST)
        .map(|worker| {
            let (url, table, k) = (worker_url(b, worker), b.table.clone(), k.clone());
            let (log, exe, statuses) = (log.clone(), test_exe.clone(), statuses.clone());
            thread::spawn(move || {
                let mut n = 0;
                while Instant::now() < until {
                    n += 1;
                    let run = format!("{worker}-{n}");
                    let status = Command::new(BIN)
                        .args(["--database-url", &url, "--table", &table, "run"])
                        .args(["--ttl", TTL, "--wait", "30s", &k, "--"])
                        .arg(&exe)
                        .args(["stamp_command", "--exact", "--nocapture", "--quiet"])
                        .arg("--test-threads=1")
                        .env(STAMP_LOG, &log)
                        .env(STAMP_RUN, &run)
                        .env(STAMP_HOLD_MS, HOLD_MS.to_string())
                        .env_remove("DATABASE_URL")
                        .env_remove("SQLOCK_DATABASE_URL")
                        .env_remove("SQLOCK_NO_PRESENCE")
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .status()
                        .unwrap();
                    statuses
                        .lock()
                        .unwrap()
                        .insert(run, status.code().unwrap_or(-1));
                }
            })
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let kills = runtime.block_on(killer(b, &k, kill, until));
    for w in workers {
        w.join().unwrap();
    }
    let statuses = std::mem::take(&mut *statuses.lock().unwrap());
    analyse(b, kill, &log, &statuses, kills)
}

/// The runs of a log of notes, with their statuses, checked for what is guaranteed
/// whatever the kills: every command that started ended, and no token was granted
/// twice; and, while only marker connections are killed (no takeover can happen),
/// tokens rise in the order the commands started. With every connection killed, a
/// holder may be taken over between its grant and its command's start, so that its
/// command starts after its taker's: counted (`late_starts`), not refused.
fn analyse(
    b: &Backend,
    kill: Kill,
    log: &Path,
    statuses: &HashMap<String, i32>,
    kills: u64,
) -> Measured {
    let what = format!("{} {kill:?}", b.name);
    let text = fs::read_to_string(log).unwrap_or_default();
    let mut runs: HashMap<String, Run> = HashMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(mark), Some(run), Some(token), Some(at)) =
            (f.first(), f.get(1), f.get(2), f.get(3))
        else {
            panic!("{what}: a torn note {line:?}");
        };
        let r = runs.entry((*run).to_owned()).or_default();
        r.token = token.parse().unwrap();
        let at: i64 = at.parse().unwrap();
        match *mark {
            "START" => r.start = Some(at),
            _ => r.end = Some(at),
        }
    }
    for (run, r) in &mut runs {
        r.status = statuses.get(run).copied();
    }
    let mut ordered: Vec<(&String, &Run)> = runs.iter().collect();
    ordered.sort_by_key(|(_, r)| r.start);
    let mut overlaps = Vec::new();
    let mut overlaps_lost = 0;
    let mut last_token = 0;
    let mut late_starts = 0;
    let mut tokens: Vec<i64> = runs.values().map(|r| r.token).collect();
    tokens.sort_unstable();
    let granted = tokens.len();
    tokens.dedup();
    assert_eq!(tokens.len(), granted, "{what}: a token was granted twice");
    // The latest end among the commands started so far, and whose it was.
    let mut latest: Option<(i64, &Run)> = None;
    for (run, r) in &ordered {
        let start = r
            .start
            .unwrap_or_else(|| panic!("{what}: {run} never started"));
        let end = r.end.unwrap_or_else(|| panic!("{what}: {run} never ended"));
        if r.token < last_token {
            assert!(
                kill == Kill::All,
                "{what}: run {run} started with token {} after token {last_token}",
                r.token
            );
            late_starts += 1;
        }
        last_token = last_token.max(r.token);
        if let Some((until, earlier)) = latest {
            if start < until {
                overlaps.push(Duration::from_nanos(u64::try_from(until - start).unwrap()));
                if earlier.status == Some(76) {
                    overlaps_lost += 1;
                }
            }
        }
        if latest.is_none_or(|(until, _)| end > until) {
            latest = Some((end, r));
        }
    }
    Measured {
        runs: runs.len(),
        kills,
        lost: runs.values().filter(|r| r.status == Some(76)).count(),
        overlaps,
        overlaps_lost,
        late_starts,
    }
}

fn report(b: &Backend, kill: Kill, m: &Measured) {
    let max = m.overlaps.iter().max().copied().unwrap_or_default();
    let mut sorted = m.overlaps.clone();
    sorted.sort();
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or_default();
    println!(
        "{} kills of {kill:?} (TTL {TTL}, {} processes, {} ms commands): {} runs, {} \
         connections ended, {} runs lost their lock; {} overlaps (the earlier run lost \
         its lock in {}), median {median:?}, max {max:?}; {} commands started after \
         their takers' (taken over between grant and start)",
        b.name,
        HOSTS * PROCESSES_PER_HOST,
        HOLD_MS,
        m.runs,
        m.kills,
        m.lost,
        m.overlaps.len(),
        m.overlaps_lost,
        m.late_starts,
    );
}

#[test]
fn killed_connections_through_sqlock_run() {
    let servers: Vec<Backend> = backends("cli_presence_kills")
        .into_iter()
        .filter(|b| b.name != "sqlite")
        .collect();
    for b in &servers {
        if b.name == "mysql" {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(mysql_users(b));
        }
        let marker = measure(b, Kill::Marker);
        report(b, Kill::Marker, &marker);
        assert!(
            marker.kills > 0,
            "{}: no marker connection was killed",
            b.name
        );
        assert!(
            marker.overlaps.is_empty(),
            "{}: commands ran at once while only marker connections were killed: {:?}",
            b.name,
            marker.overlaps
        );
        assert_eq!(
            marker.lost, 0,
            "{}: a killed marker connection cost a lock",
            b.name
        );
        let all = measure(b, Kill::All);
        report(b, Kill::All, &all);
        assert!(all.kills > 0, "{}: no connection was killed", b.name);
    }
}
