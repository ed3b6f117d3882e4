//! `sqlock elect` and `sqlock leader`, black-box, on every backend: several candidate
//! processes, one leader at a time with rising terms; a SIGKILLed leader replaced
//! within the TTL; a leader whose command ends resigns, and the next gets in before
//! the lease would have expired (database clock); a leader paused past its TTL is
//! replaced, and resumed it stops its command and exits 76, or with --again campaigns
//! again; `leader` tells who leads, and exits 75 when nobody does.

mod common;

use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::{alive, backends, in_parallel, key, signal, stderr, stdout, wait_exit, Backend};

/// A liveness bound for waits that take a TTL or so when things work.
const LIVENESS: Duration = Duration::from_secs(30);

/// The candidates' command: appends `TERM ID PID` to `log`, then runs until stopped.
fn leader_script(log: &std::path::Path) -> String {
    format!(
        "echo \"$SQLOCK_TERM $SQLOCK_LEADER_ID $$\" >> {}; exec sleep 60",
        log.display()
    )
}

/// The lines of a log of [`leader_script`]: term, identity, pid.
fn lines(log: &std::path::Path) -> Vec<(i64, String, u32)> {
    fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            Some((
                f.next()?.parse().ok()?,
                f.next()?.to_owned(),
                f.next()?.parse().ok()?,
            ))
        })
        .collect()
}

/// Waits until `log` has `n` lines, and returns them.
fn wait_lines(log: &std::path::Path, n: usize) -> Vec<(i64, String, u32)> {
    let started = Instant::now();
    loop {
        let l = lines(log);
        if l.len() >= n {
            return l;
        }
        assert!(
            started.elapsed() < LIVENESS,
            "{} has {} lines, not {n}",
            log.display(),
            l.len()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// `sqlock leader --json NAME`: the JSON, and the exit status.
fn leader(b: &Backend, name: &str) -> (serde_json::Value, i32) {
    let o = b.sqlock(&["leader", "--json", name]);
    let json = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{}: {e}: {}{}", b.name, stdout(&o), stderr(&o)));
    (json, o.status.code().unwrap_or(-1))
}

fn time(v: &serde_json::Value, field: &str) -> DateTime<Utc> {
    v[field]
        .as_str()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .unwrap_or_else(|| panic!("no {field} in {v}"))
        .with_timezone(&Utc)
}

/// The database clock when `leader --json` answered `v`.
fn db_now(v: &serde_json::Value) -> DateTime<Utc> {
    let left = v["expires_in_ms"].as_i64().unwrap_or_else(|| panic!("{v}"));
    time(v, "expires_at") - chrono::Duration::milliseconds(left)
}

/// Whether a process is stopped (SIGSTOP), by its state in /proc.
fn stopped(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").and_then(|(_, r)| r.chars().next()))
        == Some('T')
}

/// Whether a process is dead: gone, or a zombie nobody reaped yet (an orphan's reaper
/// may be slow, or not reap at all in a container).
fn dead(pid: u32) -> bool {
    !alive(pid)
        || fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(") ").and_then(|(_, r)| r.chars().next()))
            .is_none_or(|state| state == 'Z' || state == 'X')
}

/// Waits until a process is dead.
fn wait_gone(pid: u32, what: &str) {
    let started = Instant::now();
    while !dead(pid) {
        assert!(started.elapsed() < LIVENESS, "{what}: {pid} still runs");
        thread::sleep(Duration::from_millis(20));
    }
}

/// Four candidate processes, each leading three terms in turn (its command marks the
/// start and the end of its term in one file, then exits, and sqlock resigns): the
/// marks never interleave, so no two terms overlapped, and the terms rise.
#[test]
fn several_candidates_lead_one_at_a_time_with_rising_terms() {
    const PROCESSES: usize = 4;
    const TERMS_EACH: usize = 3;
    in_parallel(backends("cli_elect_overlap"), |b| {
        let what = b.name;
        let name = key("overlap");
        let log = b.path("terms.log");
        // The sleep widens the window an overlap would show in.
        let script = format!(
            "echo \"start $SQLOCK_TERM\" >> {0}; sleep 0.05; echo \"end $SQLOCK_TERM\" >> {0}",
            log.display()
        );
        let workers: Vec<_> = (0..PROCESSES)
            .map(|i| {
                let (b, name, script) = (b.clone(), name.clone(), script.clone());
                thread::spawn(move || {
                    for _ in 0..TERMS_EACH {
                        let id = format!("p{i}");
                        let o = b.sqlock(&[
                            "elect", "--ttl", "10s", "--id", &id, &name, "--", "sh", "-c", &script,
                        ]);
                        assert!(o.status.success(), "{}: {}", b.name, stderr(&o));
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        let text = fs::read_to_string(&log).unwrap();
        let marks: Vec<&str> = text.lines().collect();
        assert_eq!(marks.len(), 2 * PROCESSES * TERMS_EACH, "{what}: {text}");
        let mut last = 0i64;
        for pair in marks.chunks(2) {
            let term = |line: &str, mark: &str| -> i64 {
                line.strip_prefix(mark)
                    .and_then(|t| t.parse().ok())
                    .unwrap_or_else(|| panic!("{what}: {line:?} is not {mark:?}: {text}"))
            };
            let (start, end) = (term(pair[0], "start "), term(pair[1], "end "));
            assert_eq!(start, end, "{what}: overlapping terms {pair:?}");
            assert!(start > last, "{what}: term {start} after {last}");
            last = start;
        }
    });
}

#[test]
fn candidates_elect_one_leader_and_hand_over() {
    in_parallel(backends("cli_elect"), |b| {
        let what = b.name;
        let name = key("elect");
        let log = b.path("leaders.log");
        let script = leader_script(&log);
        // The TTL is long beside the candidates' polls (500 ms at most; 2 s on
        // PostgreSQL, where a resignation wakes them at once), so that "before the
        // lease would have expired" tells a resignation from an expiry.
        let mut candidates: Vec<_> = (0..3)
            .map(|i| {
                let id = format!("c{i}");
                b.spawn(
                    &id,
                    &[
                        "elect", "--ttl", "5s", "--id", &id, &name, "--", "sh", "-c", &script,
                    ],
                )
            })
            .collect();

        let first = wait_lines(&log, 1);
        let (term1, id1, pid1) = first[0].clone();
        let (json, status) = leader(&b, &name);
        assert_eq!(status, 0, "{what}: {json}");
        assert_eq!(
            (json["term"].as_i64(), json["leader"].as_str()),
            (Some(term1), Some(id1.as_str()))
        );
        assert_eq!(lines(&log).len(), 1, "{what}: two leaders at once");

        // SIGKILLed, the leader is replaced within the TTL (and a poll).
        let i1: usize = id1[1..].parse().unwrap();
        signal(candidates[i1].id(), "KILL");
        assert_eq!(
            wait_exit(&mut candidates[i1], LIVENESS),
            -1,
            "{what}: the kill did not take"
        );
        let killed_at = db_now(&json);
        wait_gone(pid1, what);
        let second = wait_lines(&log, 2);
        let (term2, id2, pid2) = second[1].clone();
        assert!(term2 > term1, "{what}: term {term2} after {term1}");
        assert_ne!(id2, id1, "{what}");
        let (json, _) = leader(&b, &name);
        assert_eq!(json["term"].as_i64(), Some(term2), "{what}: {json}");
        let since = time(&json, "held_since");
        assert!(
            since <= killed_at + chrono::Duration::milliseconds(5_000 + 2_500),
            "{what}: the next leader came at {since}, the leader was killed at {killed_at}"
        );

        // A leader whose command ends resigns: the next gets in before the lease would
        // have expired.
        let expires = time(&json, "expires_at");
        let i2: usize = id2[1..].parse().unwrap();
        signal(candidates[i2].id(), "TERM");
        assert_eq!(
            wait_exit(&mut candidates[i2], LIVENESS),
            143,
            "{what}: {}",
            b.log(&id2)
        );
        assert!(dead(pid2), "{what}: the command outlived its sqlock");
        let third = wait_lines(&log, 3);
        let (term3, id3, _) = third[2].clone();
        assert!(term3 > term2, "{what}");
        let (json, _) = leader(&b, &name);
        assert_eq!(
            json["leader"].as_str(),
            Some(id3.as_str()),
            "{what}: {json}"
        );
        assert!(
            time(&json, "held_since") < expires,
            "{what}: term {term3} began after the resigned lease's expiry {expires}: {json}"
        );

        let i3: usize = id3[1..].parse().unwrap();
        signal(candidates[i3].id(), "TERM");
        assert_eq!(wait_exit(&mut candidates[i3], LIVENESS), 143, "{what}");
        let (json, status) = leader(&b, &name);
        assert_eq!(
            (status, &json["leader"]),
            (75, &serde_json::Value::Null),
            "{what}"
        );
        assert_eq!(lines(&log).len(), 3, "{what}");
    });
}

#[test]
fn a_paused_leader_is_replaced_and_exits_76_or_campaigns_again() {
    let cases: Vec<(Backend, bool)> = backends("cli_elect_pause")
        .into_iter()
        .flat_map(|b| [(b.clone(), false), (b, true)])
        .collect();
    in_parallel(cases, |(b, again)| {
        let what = format!("{} again={again}", b.name);
        let name = key(&format!("pause-{again}"));
        let log = b.path(&format!("{again}-leaders.log"));
        let script = leader_script(&log);
        let spawn = |id: &str, again: bool| {
            let mut args = vec!["elect", "--ttl", "1s", "--id", id];
            if again {
                args.push("--again");
            }
            args.extend([name.as_str(), "--", "sh", "-c", script.as_str()]);
            b.spawn(&format!("{again}-{id}"), &args)
        };
        let mut a = spawn("a", again);
        let (term_a, _, pid_a) = wait_lines(&log, 1)[0].clone();
        let mut other = spawn("b", false);

        signal(a.id(), "STOP");
        let started = Instant::now();
        while !stopped(a.id()) {
            assert!(
                started.elapsed() < LIVENESS,
                "{what}: the pause did not take"
            );
            thread::sleep(Duration::from_millis(10));
        }
        let (term_b, id_b, _) = wait_lines(&log, 2)[1].clone();
        assert_eq!(id_b, "b", "{what}");
        assert!(term_b > term_a, "{what}: term {term_b} after {term_a}");
        // Still paused when the other was elected: the pause outlasted the lease.
        assert!(stopped(a.id()), "{what}: resumed too early");

        signal(a.id(), "CONT");
        let a_log = format!("{again}-a");
        if !again {
            assert_eq!(wait_exit(&mut a, LIVENESS), 76, "{what}: {}", b.log(&a_log));
            wait_gone(pid_a, &what);
            assert!(
                b.log(&a_log).contains("was lost"),
                "{what}: {}",
                b.log(&a_log)
            );
        } else {
            // It stops its command and campaigns again; once the other resigns, it
            // leads again in a new term.
            wait_gone(pid_a, &what);
            let started = Instant::now();
            // Its second campaign, after the loss.
            while b.log(&a_log).matches("campaigning in election").count() < 2 {
                assert!(started.elapsed() < LIVENESS, "{what}: {}", b.log(&a_log));
                thread::sleep(Duration::from_millis(20));
            }
            assert!(a.try_wait().unwrap().is_none(), "{what}: it exited");
            signal(other.id(), "TERM");
            assert_eq!(wait_exit(&mut other, LIVENESS), 143, "{what}");
            let (term_a2, id_a2, _) = wait_lines(&log, 3)[2].clone();
            assert_eq!(id_a2, "a", "{what}");
            assert!(term_a2 > term_b, "{what}");
            signal(a.id(), "TERM");
            assert_eq!(
                wait_exit(&mut a, LIVENESS),
                143,
                "{what}: {}",
                b.log(&a_log)
            );
            return;
        }
        signal(other.id(), "TERM");
        assert_eq!(wait_exit(&mut other, LIVENESS), 143, "{what}");
    });
}

#[test]
fn leader_tells_who_leads_and_exits_75_without_one() {
    in_parallel(backends("cli_leader"), |b| {
        let what = b.name;
        let name = key("leader");
        let o = b.sqlock(&["leader", &name]);
        assert_eq!(o.status.code(), Some(75), "{what}: {}", stderr(&o));
        assert!(stderr(&o).contains("no leader"), "{what}: {}", stderr(&o));
        let (json, status) = leader(&b, &name);
        assert_eq!(
            (status, json["election"].as_str()),
            (75, Some(name.as_str()))
        );

        // A leader whose command exits 3: sqlock exits 3 and resigns at once (the TTL
        // is a minute).
        let stop = b.path("stop");
        let ready = b.path("ready");
        let script = format!(
            "touch {}; while [ ! -e {} ]; do sleep 0.05; done; exit 3",
            ready.display(),
            stop.display()
        );
        let mut elected = b.spawn(
            "leader",
            &[
                "elect",
                "--ttl",
                "1m",
                "--id",
                "web-1:8080",
                &name,
                "--",
                "sh",
                "-c",
                &script,
            ],
        );
        let started = Instant::now();
        while !ready.exists() {
            assert!(started.elapsed() < LIVENESS, "{what}: {}", b.log("leader"));
            thread::sleep(Duration::from_millis(20));
        }
        let o = b.sqlock(&["leader", &name]);
        assert_eq!(o.status.code(), Some(0), "{what}: {}", stderr(&o));
        assert!(stdout(&o).contains("web-1:8080"), "{what}: {}", stdout(&o));
        assert!(stdout(&o).contains("term"), "{what}: {}", stdout(&o));
        let (json, status) = leader(&b, &name);
        assert_eq!(status, 0, "{what}");
        assert_eq!(json["leader"].as_str(), Some("web-1:8080"), "{what}");
        // A candidate that is still campaigning when told to stop exits 128+15, and
        // never ran its command.
        let never = b.path("never");
        let never_script = format!("touch {}", never.display());
        let mut waiting = b.spawn(
            "waiting",
            &[
                "elect",
                "--id",
                "web-2:8080",
                &name,
                "--",
                "sh",
                "-c",
                &never_script,
            ],
        );
        let started = Instant::now();
        while !b.log("waiting").contains("campaigning") {
            assert!(started.elapsed() < LIVENESS, "{what}: {}", b.log("waiting"));
            thread::sleep(Duration::from_millis(20));
        }
        signal(waiting.id(), "TERM");
        assert_eq!(
            wait_exit(&mut waiting, LIVENESS),
            143,
            "{what}: {}",
            b.log("waiting")
        );
        assert!(
            !never.exists(),
            "{what}: a candidate that never led ran its command"
        );

        // The election's lease is a lock like any other, under its own key.
        let listed = b.sqlock(&["list", "--json"]);
        assert!(
            stdout(&listed).contains(&format!("election:{name}")),
            "{what}"
        );

        fs::write(&stop, "").unwrap();
        assert_eq!(
            wait_exit(&mut elected, LIVENESS),
            3,
            "{what}: {}",
            b.log("leader")
        );
        let o = b.sqlock(&["leader", &name]);
        assert_eq!(
            o.status.code(),
            Some(75),
            "{what}: resigned, yet {}",
            stdout(&o)
        );
    });
}
