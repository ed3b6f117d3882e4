//! `sqlock release --force` takes a lock from a `sqlock run` without two commands ever
//! running at once: the holder is told (at its next renewal, at once on PostgreSQL),
//! stops its command, gives the lock back and exits 76 saying it was revoked, and a
//! second `sqlock run` of the key, started right after the operator's call, starts
//! its command only once the first one's has ended. `--holder-gone` keeps the
//! immediate release (the key is free at once). A for-update holder is refused with
//! exit 77. On every backend and leased strategy (the fair one included).

mod common;

use std::fs;
use std::time::Duration;

use common::{
    alive, backends, in_parallel, key, stderr, stdout, wait_exit, wait_for_line, Backend,
};

/// The holder's TTL: its renewals come every 10 s, so that without the revocation's
/// wait a second run would overlap it for seconds.
const TTL: &str = "30s";

/// Starts a holder of `k` whose command marks its start and, on SIGTERM, its end in
/// `log` (appends land in the order they happen), and waits until it runs: the child
/// and the command's pid.
fn hold(b: &Backend, strategy: &str, k: &str, log: &str) -> (std::process::Child, u32) {
    let pid_file = b.path(&format!("{k}.pid"));
    let script = format!(
        "trap 'echo \"end $SQLOCK_FENCING_TOKEN\" >> {log}; exit 143' TERM; \
         echo \"start $SQLOCK_FENCING_TOKEN\" >> {log}; echo $$ > {pid}; \
         while :; do sleep 0.05; done",
        pid = pid_file.display()
    );
    let holder = b.spawn(
        &format!("{k}-holder"),
        &[
            "run",
            "--strategy",
            strategy,
            "--ttl",
            TTL,
            k,
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    let pid = wait_for_line(&pid_file, Duration::from_secs(15))
        .trim()
        .parse()
        .unwrap();
    (holder, pid)
}

/// The marks of `log`, checked: every start is followed by its own end before the
/// next start (no two commands at once), and tokens rise. The tokens, in order.
fn no_overlap(what: &str, log: &str) -> Vec<i64> {
    let text = fs::read_to_string(log).unwrap();
    let mut open: Option<i64> = None;
    let mut tokens = Vec::new();
    for line in text.lines() {
        let (mark, token) = line.split_once(' ').unwrap();
        let token: i64 = token.parse().unwrap();
        match mark {
            "start" => {
                assert!(open.is_none(), "{what}: two commands at once:\n{text}");
                assert!(tokens.last().is_none_or(|&t| t < token), "{what}:\n{text}");
                open = Some(token);
                tokens.push(token);
            }
            _ => {
                assert_eq!(open, Some(token), "{what}: an end of no start:\n{text}");
                open = None;
            }
        }
    }
    assert!(open.is_none(), "{what}: a command never ended:\n{text}");
    tokens
}

#[test]
fn a_revoked_run_never_overlaps_the_next() {
    let cases: Vec<(Backend, &str)> = backends("cli_revoke")
        .into_iter()
        .flat_map(|b| ["lease", "insert", "fair"].map(move |s| (b.clone(), s)))
        .collect();
    in_parallel(cases, |(b, strategy)| {
        let what = format!("{} {strategy}", b.name);
        let k = key(&format!("revoke-{strategy}"));
        let log = b.path(&format!("{k}.marks")).display().to_string();
        let (mut holder, pid) = hold(&b, strategy, &k, &log);

        let o = b.sqlock(&["release", "--force", &k]);
        assert_eq!(o.status.code(), Some(0), "{what}: {}", stderr(&o));
        let answer = stdout(&o);
        // Right after the operator's call: it waits for the key, and may get it only
        // once the first command has ended.
        let marks = format!(
            "echo \"start $SQLOCK_FENCING_TOKEN\" >> {log}; \
             echo \"end $SQLOCK_FENCING_TOKEN\" >> {log}"
        );
        let second = b.sqlock(&[
            "run",
            "--strategy",
            strategy,
            "--wait",
            "2m",
            &k,
            "--",
            "sh",
            "-c",
            &marks,
        ]);
        assert_eq!(second.status.code(), Some(0), "{what}: {}", stderr(&second));

        assert_eq!(
            wait_exit(&mut holder, Duration::from_secs(60)),
            76,
            "{what}: {}",
            b.log(&format!("{k}-holder"))
        );
        assert_eq!(no_overlap(&what, &log).len(), 2, "{what}");
        assert!(
            answer.contains("revoked") && answer.contains("at the latest"),
            "{what}: {answer}"
        );
        let said = b.log(&format!("{k}-holder"));
        assert!(said.contains("revoked by an operator"), "{what}: {said}");
        assert!(!alive(pid), "{what}: the command was not stopped");
        // Given back: nothing is held, nothing to revoke.
        let o = b.sqlock(&["release", "--force", &k]);
        assert_eq!(o.status.code(), Some(75), "{what}: {}", stderr(&o));
    });
}

/// `--holder-gone`: the key is free at once (a second run gets it without waiting),
/// and the holder, still running, learns of it only at its next renewal: as
/// documented, the two may overlap.
#[test]
fn holder_gone_frees_the_key_at_once() {
    in_parallel(backends("cli_holder_gone"), |b| {
        let k = key("gone");
        let log = b.path(&format!("{k}.marks")).display().to_string();
        let (mut holder, _) = hold(&b, "lease", &k, &log);
        let o = b.sqlock(&["release", "--force", "--holder-gone", &k]);
        assert_eq!(o.status.code(), Some(0), "{}: {}", b.name, stderr(&o));
        assert!(stdout(&o).contains("at once"), "{}: {}", b.name, stdout(&o));
        let next = b.sqlock(&["run", "--no-wait", &k, "--", "true"]);
        assert_eq!(next.status.code(), Some(0), "{}: {}", b.name, stderr(&next));
        assert_eq!(
            wait_exit(&mut holder, Duration::from_secs(60)),
            76,
            "{}: {}",
            b.name,
            b.log(&format!("{k}-holder"))
        );
        let said = b.log(&format!("{k}-holder"));
        assert!(!said.contains("revoked"), "{}: {said}", b.name);
    });
}

/// A for-update lock cannot be taken by force: exit 77, whichever way is asked, and
/// the holder runs on.
#[test]
fn a_for_update_holder_is_refused_with_its_own_code() {
    let servers: Vec<Backend> = backends("cli_revoke_fu")
        .into_iter()
        .filter(|b| b.name != "sqlite")
        .collect();
    in_parallel(servers, |b| {
        let k = key("fu");
        let log = b.path(&format!("{k}.marks")).display().to_string();
        let (mut holder, pid) = hold(&b, "for-update", &k, &log);
        for args in [
            &["release", "--force"][..],
            &["release", "--force", "--holder-gone"],
        ] {
            let mut argv = args.to_vec();
            argv.push(&k);
            let o = b.sqlock(&argv);
            assert_eq!(
                o.status.code(),
                Some(77),
                "{} {args:?}: {}",
                b.name,
                stderr(&o)
            );
            assert!(
                stderr(&o).contains("for-update"),
                "{}: {}",
                b.name,
                stderr(&o)
            );
        }
        assert!(alive(pid), "{}: the for-update holder was stopped", b.name);
        common::signal(holder.id(), "TERM");
        wait_exit(&mut holder, Duration::from_secs(30));
    });
}
