//! A SIGKILLed `sqlock run` takes its command with it (Linux: the command gets a
//! parent-death signal), so the command never runs on without the lock. The normal
//! ending (the command's status passed on) is covered by `run_contract.rs`.
//!
//! Only Linux has a parent-death signal; elsewhere the orphan runs on, as documented.
#![cfg(target_os = "linux")]

mod common;

use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use common::{backends, in_parallel, key, kill_orphan, signal, wait_for_line};

/// How long the orphaned command may take to die: a liveness bound, not a timing
/// assertion (it normally goes within milliseconds).
const DEADLINE: Duration = Duration::from_secs(10);

/// Whether a process still runs: there and not a zombie. A killed orphan is
/// reparented to init (or a subreaper), which may be slow to reap it, or never do.
fn running(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false; // reaped
    };
    // `pid (comm) state ...`: comm may hold spaces and parentheses, the state
    // follows the last ')'.
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
        .unwrap_or("?");
    !matches!(state, "Z" | "X" | "x")
}

#[test]
fn a_killed_sqlock_takes_its_command_with_it() {
    in_parallel(backends("cli_parent_death"), |b| {
        let pid_file = b.path("command.pid");
        let script = format!("echo $$ > {}; exec sleep 30", pid_file.display());
        let k = key("parent-death");
        let mut holder = b.spawn(
            "holder",
            &["run", "--ttl", "2s", &k, "--", "sh", "-c", &script],
        );
        let command: u32 = wait_for_line(&pid_file, Duration::from_secs(10))
            .trim()
            .parse()
            .unwrap();
        assert!(running(command), "{}: the command is not running", b.name);

        // sqlock itself, not its command: no handler of its own runs.
        signal(holder.id(), "KILL");
        holder.wait().unwrap();

        let killed = Instant::now();
        while running(command) {
            if killed.elapsed() > DEADLINE {
                kill_orphan(command); // leave no orphan behind
                panic!(
                    "{}: the command (pid {command}) still ran {DEADLINE:?} after sqlock \
                     was SIGKILLed, without the lock",
                    b.name
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
        println!(
            "{}: the command was gone {:?} after sqlock was killed",
            b.name,
            killed.elapsed()
        );
    });
}
