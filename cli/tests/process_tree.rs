//! `sqlock run` answers for the command's whole process tree, not only the process it
//! started: a shell script that starts programs, a pipeline, a program that ignores
//! SIGTERM. Each test tries to leave a process of the tree running without the lock:
//! sqlock SIGKILLed, the lock lost, an operator's SIGTERM, a command that exits and
//! leaves processes behind; and a command that reads the terminal must get it.
//!
//! Every test first checks that the tree it built is really there (every process
//! running, in the command's process group), so that none passes on a tree that never
//! formed. Linux only: the processes are found through `/proc`.
#![cfg(target_os = "linux")]

mod common;

use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use common::{backends, in_parallel, key, signal, stderr, wait_exit, wait_for_line, Backend};

/// The script every test runs under the lock: a program it starts in the background
/// that ignores SIGTERM, a pipeline of two, and a program in the foreground, each a
/// process of its own (none is `exec`ed). Once all are started it writes its own pid
/// (the process group's id) to `$1`.
const TREE: &str = r#"
(trap '' TERM; exec sleep 300) &
sleep 301 | sleep 302 &
echo $$ > "$1"
sleep 303
"#;

/// How many processes the tree has: the shell, the SIGTERM-deaf sleep, the two of the
/// pipeline and the foreground sleep.
const TREE_SIZE: usize = 5;

/// The promise when sqlock is SIGKILLed: every process of the tree stopped within a
/// second.
const KILLED_WITHIN: Duration = Duration::from_secs(1);

/// A bound for what should take milliseconds, so that a broken build fails rather
/// than hangs. Not a timing assertion.
const LIVENESS: Duration = Duration::from_secs(20);

/// A process's state letter and process group, from `/proc/PID/stat`; `None` once it
/// is reaped.
fn stat(pid: u32) -> Option<(char, u32)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp ...`: comm may hold spaces and parentheses, the
    // fields follow the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// Whether a process runs: there, and neither a zombie nor dead. A killed process
/// reparented to init may wait a while to be reaped; it runs no more.
fn running(pid: u32) -> bool {
    stat(pid).is_some_and(|(state, _)| !matches!(state, 'Z' | 'X' | 'x'))
}

/// The running processes of process group `pgid`.
fn group(pgid: u32) -> Vec<u32> {
    let mut pids: Vec<u32> = fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&pid| stat(pid).is_some_and(|(s, g)| g == pgid && !matches!(s, 'Z' | 'X' | 'x')))
        .collect();
    pids.sort_unstable();
    pids
}

/// Starts `sqlock run` of [`TREE`] (plus `args` before the key) and waits until the
/// whole tree runs in a process group of its own. Returns sqlock and the members.
fn start_tree(
    b: &Backend,
    log: &str,
    k: &str,
    args: &[&str],
) -> (std::process::Child, u32, Vec<u32>) {
    let pid_file = b.path(&format!("{log}.pgid"));
    let pid_path = pid_file.display().to_string();
    let mut argv = vec!["run"];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&[k, "--", "sh", "-c", TREE, "tree", &pid_path]);
    let holder = b.spawn(log, &argv);
    let pgid: u32 = wait_for_line(&pid_file, LIVENESS).trim().parse().unwrap();
    let started = Instant::now();
    let members = loop {
        let members = group(pgid);
        if members.len() == TREE_SIZE {
            break members;
        }
        assert!(
            started.elapsed() < LIVENESS,
            "{}: the tree never formed: group {pgid} has {members:?}",
            b.name
        );
        thread::sleep(Duration::from_millis(10));
    };
    // The command's group is its own, not sqlock's: else the terminal's and the
    // shell's signals would reach both, and sqlock's group could not be told apart.
    assert_eq!(
        stat(pgid).map(|s| s.1),
        Some(pgid),
        "{}: the shell leads its group",
        b.name
    );
    assert_ne!(
        stat(holder.id()).map(|s| s.1),
        Some(pgid),
        "{}: sqlock is not in the command's group",
        b.name
    );
    (holder, pgid, members)
}

/// Waits until none of `pids` runs; fails after `within`, killing what is left so
/// that no test leaves processes behind.
fn wait_all_stopped(b: &Backend, what: &str, pids: &[u32], within: Duration) {
    let started = Instant::now();
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|&p| running(p)).collect();
        if left.is_empty() {
            return;
        }
        if started.elapsed() > within {
            for pid in &left {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
            panic!("{}: {what}: {left:?} still ran {within:?} later", b.name);
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// Whether the key can be taken right now by another process.
fn free(b: &Backend, k: &str) -> bool {
    b.sqlock(&["run", "--no-wait", k, "--", "true"])
        .status
        .success()
}

#[test]
fn a_killed_sqlock_takes_the_whole_tree_with_it() {
    in_parallel(backends("cli_tree_kill"), |b| {
        let k = key("tree-kill");
        let (mut holder, _, members) = start_tree(&b, "kill", &k, &["--ttl", "30s"]);
        assert!(!free(&b, &k), "{}: the key is not held", b.name);

        // sqlock itself, with no chance to run a handler of its own.
        signal(holder.id(), "KILL");
        let killed = Instant::now();
        wait_all_stopped(&b, "after sqlock was SIGKILLed", &members, LIVENESS);
        let took = killed.elapsed();
        holder.wait().unwrap();
        println!(
            "{}: the tree of {} was gone {took:?} after the SIGKILL",
            b.name,
            members.len()
        );
        assert!(
            took <= KILLED_WITHIN,
            "{}: the tree took {took:?} to stop, over the promised {KILLED_WITHIN:?}",
            b.name
        );
        // It was the watcher, and it said so.
        let started = Instant::now();
        while !b.log("kill").contains("was killed") {
            assert!(
                started.elapsed() < LIVENESS,
                "{}: the watcher did not report: {}",
                b.name,
                b.log("kill")
            );
            thread::sleep(Duration::from_millis(20));
        }
    });
}

#[test]
fn a_lost_lock_stops_the_whole_tree() {
    in_parallel(backends("cli_tree_lost"), |b| {
        let k = key("tree-lost");
        let (mut holder, _, members) = start_tree(&b, "lost", &k, &["--ttl", "3s"]);
        // Another operator takes the lock away: the holder's next renewal finds it gone.
        let forced = b.sqlock(&["release", "--force", &k]);
        assert!(forced.status.success(), "{}: {}", b.name, stderr(&forced));
        let status = wait_exit(&mut holder, LIVENESS);
        assert_eq!(status, 76, "{}: {}", b.name, b.log("lost"));
        // sqlock exits only once the group is empty, SIGTERM-deaf member included
        // (SIGKILLed after the grace).
        let left: Vec<u32> = members.iter().copied().filter(|&p| running(p)).collect();
        assert!(
            left.is_empty(),
            "{}: {left:?} ran on after the loss",
            b.name
        );
        assert!(
            b.log("lost").contains("its processes were stopped"),
            "{}",
            b.log("lost")
        );
    });
}

#[test]
fn sigterm_to_sqlock_reaches_every_process() {
    in_parallel(backends("cli_tree_term"), |b| {
        let k = key("tree-term");
        let marks = b.path("term-marks");
        fs::create_dir_all(&marks).unwrap();
        // Three processes that note the SIGTERM they get and then exit: the shell, one
        // it started, and one of a pipeline. Each says when its trap is set: a signal
        // that came before would end it without a note, and prove nothing.
        let script = format!(
            r#"
            note() {{ trap "echo > {m}/$1; exit 0" TERM; echo > {m}/$1.ready; while :; do sleep 0.05; done; }}
            note bg & note pipe | cat &
            trap "echo > {m}/shell; wait; exit 0" TERM
            echo $$ > {m}/pgid
            while :; do sleep 0.05; done
            "#,
            m = marks.display()
        );
        let mut holder = b.spawn("term", &["run", &k, "--", "sh", "-c", &script]);
        for ready in ["pgid", "bg.ready", "pipe.ready"] {
            wait_for_line(&marks.join(ready), LIVENESS);
        }
        signal(holder.id(), "TERM");
        let status = wait_exit(&mut holder, LIVENESS);
        for mark in ["shell", "bg", "pipe"] {
            assert!(
                marks.join(mark).exists(),
                "{}: the {mark} process never got the SIGTERM",
                b.name
            );
        }
        // The shell's own answer to the signal is sqlock's.
        assert_eq!(status, 0, "{}: {}", b.name, b.log("term"));
        assert!(free(&b, &k), "{}: the lock was not released", b.name);
    });
}

#[test]
fn what_the_command_leaves_behind_is_stopped_before_the_lock_goes() {
    in_parallel(backends("cli_tree_leftover"), |b| {
        let k = key("tree-leftover");
        let pids = b.path("leftover.pids");
        // The shell exits at once, leaving a SIGTERM-deaf program and a plain one
        // (their output elsewhere, so that the test does not wait on it).
        let script = format!(
            "(trap '' TERM; exec sleep 300) >/dev/null 2>&1 & echo $! > {p}; \
             sleep 301 >/dev/null 2>&1 & echo $! >> {p}; exit 3",
            p = pids.display()
        );
        let started = Instant::now();
        let ran = b.sqlock(&["run", &k, "--", "sh", "-c", &script]);
        assert_eq!(ran.status.code(), Some(3), "{}: {}", b.name, stderr(&ran));
        let left: Vec<u32> = fs::read_to_string(&pids)
            .unwrap()
            .lines()
            .map(|l| l.trim().parse().unwrap())
            .collect();
        assert_eq!(left.len(), 2, "{}", b.name);
        // sqlock returned only after both were gone, the deaf one by SIGKILL after
        // the grace; and only then was the lock released.
        assert!(
            left.iter().all(|&p| !running(p)),
            "{}: {left:?} outlived the run",
            b.name
        );
        assert!(free(&b, &k), "{}: the lock was not released", b.name);
        println!(
            "{}: leftovers stopped, run took {:?}",
            b.name,
            started.elapsed()
        );
    });
}

#[test]
fn an_interactive_command_gets_the_terminal() {
    // `script` gives sqlock a terminal on its standard input, as an interactive shell
    // would. A command in a background group that reads the terminal is stopped
    // (SIGTTIN) and would hold the lock for ever: the group must get the foreground.
    let Some(b) = backends("cli_tree_tty")
        .into_iter()
        .find(|b| b.name == "sqlite")
    else {
        panic!("sqlite is always there");
    };
    let k = key("tree-tty");
    let out = b.path("tty.out");
    let inner = format!(
        "{} --database-url {} --table {} run {} -- sh -c 'read line; echo \"got:$line\" > {}'",
        common::BIN,
        b.url,
        b.table,
        k,
        out.display()
    );
    let mut script = std::process::Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("script (util-linux) runs");
    {
        use std::io::Write;
        let mut stdin = script.stdin.take().unwrap();
        // The terminal keeps the line until the command reads it, whenever that is.
        stdin.write_all(b"hello\n").unwrap();
        stdin.flush().unwrap();
        let started = Instant::now();
        while !out.exists() && started.elapsed() < LIVENESS {
            thread::sleep(Duration::from_millis(20));
        }
    }
    let status = wait_exit(&mut script, LIVENESS);
    // Should it have failed, leave nothing of it running.
    let _ = std::process::Command::new("pkill")
        .args(["-KILL", "-f", &k])
        .status();
    let got = fs::read_to_string(&out).unwrap_or_default();
    assert_eq!(
        got.trim(),
        "got:hello",
        "the command did not read the terminal (status {status})"
    );
}
