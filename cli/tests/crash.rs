//! Scenario 3: a holder killed with SIGKILL leaves no lock behind for longer than its
//! TTL: another process waiting for the key gets it within the TTL plus a second.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{backends, in_parallel, key, kill_orphan, signal, stderr, wait_for_line, Backend};

#[test]
fn a_killed_holder_frees_the_key_within_its_ttl() {
    let cases: Vec<(Backend, &str)> = backends("cli_crash")
        .into_iter()
        .flat_map(|b| b.strategies().into_iter().map(move |s| (b.clone(), s)))
        .collect();
    in_parallel(cases, |(b, strategy)| {
        let what = format!("{} {strategy}", b.name);
        let k = key(&format!("crash-{strategy}"));
        let pid_file = b.path(&format!("{strategy}.pid"));
        let script = format!("echo $$ > {}; exec sleep 30", pid_file.display());
        let mut holder = b.spawn(
            &format!("{strategy}-holder"),
            &[
                "run",
                "--strategy",
                strategy,
                "--ttl",
                "2s",
                &k,
                "--",
                "sh",
                "-c",
                &script,
            ],
        );
        let child: u32 = wait_for_line(&pid_file, Duration::from_secs(10))
            .trim()
            .parse()
            .unwrap();
        // The sqlock process, not its command: nothing releases the lock.
        signal(holder.id(), "KILL");
        let killed = SystemTime::now();
        holder.wait().unwrap();
        kill_orphan(child); // the orphaned command, should it run on

        // The next holder's command notes the wall-clock time it started at: the
        // moment the lock was granted, give or take a process start.
        let granted_file = b.path(&format!("{strategy}.granted"));
        let note = format!("date +%s%N > {}", granted_file.display());
        let next = b.sqlock(&[
            "run",
            "--strategy",
            strategy,
            "--wait",
            "10s",
            &k,
            "--",
            "sh",
            "-c",
            &note,
        ]);
        assert!(next.status.success(), "{what}: {}", stderr(&next));
        let granted_ns: u64 = wait_for_line(&granted_file, Duration::from_secs(1))
            .trim()
            .parse()
            .expect("nanoseconds");
        let granted = UNIX_EPOCH + Duration::from_nanos(granted_ns);
        let took = granted.duration_since(killed).unwrap_or_default();
        // The contract: within the TTL (2 s) plus a second.
        assert!(took < Duration::from_secs(3), "{what}: took {took:?}");
        println!("{what}: a killed holder's key taken {took:?} later (TTL 2 s)");
    });
}
