//! The clocks of the hosts that run `sqlock`, moved with libfaketime
//! (`scripts/fault-db.sh up` installs it); the monotonic clock is left true, as a
//! real clock jump leaves it.
//!
//! - On the servers a client's clock takes no part in expiry: a holder whose clock
//!   jumps two minutes forward and then back keeps its lease through renewals sent
//!   under each jumped clock, and nobody else is granted the key meanwhile.
//! - SQLite's database clock is the clock of the host each process runs on: the lease
//!   statements read `julianday('now')` in the process that runs them. A process whose
//!   clock runs ahead by more than the TTL sees a held lease as lapsed and takes the
//!   key; its fencing token is still the higher one, and the holder it deposed finds
//!   out at its next renewal, stops its command and exits 76.

mod common;

use std::fs;
use std::path::Path;
use std::time::Duration;

use common::{alive, backends, key, signal, stderr, wait_exit, wait_for_line, Backend};

const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

fn need_faketime() {
    assert!(
        Path::new(FAKETIME).exists(),
        "{FAKETIME} is missing: scripts/fault-db.sh up installs Debian's libfaketime"
    );
}

/// Replaces the offset file whole: libfaketime reads it on every clock call.
fn set_offset(file: &Path, offset: &str) {
    let tmp = file.with_extension("tmp");
    fs::write(&tmp, format!("{offset}\n")).unwrap();
    fs::rename(&tmp, file).unwrap();
}

/// The holder's lease TTL. `sqlock run` renews every third of it ([`PERIOD`]), so the
/// lease outlives two renewals that fail or come late before it could lapse.
const TTL: Duration = Duration::from_secs(6);
const PERIOD: Duration = Duration::from_secs(2);

/// The expiry the database holds for `k`, as `list --json` reports it.
fn expiry(b: &Backend, k: &str) -> Option<String> {
    let o = b.sqlock(&["list", "--json"]);
    assert!(o.status.success(), "{}: {}", b.name, stderr(&o));
    let all: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let lock = all.as_array()?.iter().find(|l| l["key"] == k)?;
    lock["expires_at"].as_str().map(str::to_owned)
}

/// Waits until the holder of `k` has renewed twice since now (its expiry moved twice):
/// the first may have been sent before now, the second surely was not. A bound of
/// several TTLs, so that a holder that stopped renewing fails rather than hangs.
fn two_renewals(b: &Backend, k: &str, what: &str) {
    let mut last = expiry(b, k);
    let mut moves = 0;
    let started = std::time::Instant::now();
    while moves < 2 {
        assert!(
            started.elapsed() < TTL * 5,
            "{what}: the lease was not renewed twice in {:?} (expiry {last:?})",
            TTL * 5
        );
        std::thread::sleep(PERIOD / 10);
        let now = expiry(b, k);
        assert!(now.is_some(), "{what}: the lock is no longer listed");
        if now != last {
            moves += 1;
            last = now;
        }
    }
}

/// The four cases run one after the other: in parallel, each process under
/// libfaketime, a slow machine could starve a holder's renewals.
#[test]
fn a_client_clock_jump_changes_nothing_on_the_servers() {
    need_faketime();
    let cases: Vec<_> = backends("cli_client_clock")
        .into_iter()
        .filter(|b| b.name != "sqlite")
        .flat_map(|b| ["lease", "insert"].map(move |s| (b.clone(), s)))
        .collect();
    for (b, strategy) in cases {
        let what = format!("{} {strategy}", b.name);
        let k = key(&format!("client-clock-{strategy}"));
        let first = b.path(&format!("{strategy}-holder"));
        let offset = b.path(&format!("{strategy}-offset"));
        set_offset(&offset, "+0");
        let script = format!(
            "echo \"$$ $SQLOCK_FENCING_TOKEN\" > {}; exec sleep 60",
            first.display()
        );
        let log = format!("{strategy}-holder");
        let err = fs::File::create(b.path(&format!("{log}.stderr"))).unwrap();
        let mut holder = b
            .command(&[
                "run",
                "--strategy",
                strategy,
                "--ttl",
                &format!("{}s", TTL.as_secs()),
                &k,
                "--",
                "sh",
                "-c",
                &script,
            ])
            .env("LD_PRELOAD", FAKETIME)
            .env("FAKETIME_TIMESTAMP_FILE", &offset)
            .env("FAKETIME_NO_CACHE", "1")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .stdout(std::process::Stdio::null())
            .stderr(err)
            .spawn()
            .unwrap();
        let line = wait_for_line(&first, Duration::from_secs(10));
        let child: u32 = line.split_whitespace().next().unwrap().parse().unwrap();
        for jump in ["+120", "-120"] {
            set_offset(&offset, jump);
            // The holder's environment does move a process's clock.
            let faked = std::process::Command::new("date")
                .arg("+%s")
                .env("LD_PRELOAD", FAKETIME)
                .env("FAKETIME_TIMESTAMP_FILE", &offset)
                .env("FAKETIME_NO_CACHE", "1")
                .output()
                .unwrap();
            let faked: i64 = String::from_utf8_lossy(&faked.stdout)
                .trim()
                .parse()
                .unwrap();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs() as i64;
            let want: i64 = jump.parse().unwrap();
            assert!(
                (faked - now - want).abs() <= 5,
                "{what}: date reads {faked}, now {now}"
            );
            // Renewals sent under the jumped clock: were the holder's clock used in
            // the expiry, the lease would be gone or the key taken now.
            two_renewals(&b, &k, &format!("{what} {jump}"));
            let other = b.sqlock(&["run", "--strategy", strategy, "--no-wait", &k, "--", "true"]);
            assert_eq!(
                other.status.code(),
                Some(75),
                "{what} {jump}: {}",
                stderr(&other)
            );
            assert!(
                holder.try_wait().unwrap().is_none() && alive(child),
                "{what} {jump}: the holder stopped: {}",
                b.log(&log)
            );
        }
        signal(holder.id(), "TERM");
        wait_exit(&mut holder, Duration::from_secs(10));
        assert!(!b.log(&log).contains("lost"), "{what}: {}", b.log(&log));
    }
}

#[test]
fn a_host_clock_ahead_by_more_than_the_ttl_takes_the_key_and_the_holder_exits_76() {
    need_faketime();
    let b = backends("cli_host_clock")
        .into_iter()
        .find(|b| b.name == "sqlite")
        .expect("SQLite is always there");
    for strategy in ["lease", "insert"] {
        let k = key(&format!("clock-{strategy}"));
        let first = b.path(&format!("{strategy}-1"));
        let second = b.path(&format!("{strategy}-2"));
        let script = format!(
            "echo \"$$ $SQLOCK_FENCING_TOKEN\" > {}; exec sleep 60",
            first.display()
        );
        let log = format!("{strategy}-holder");
        let mut holder = b.spawn(
            &log,
            &[
                "run",
                "--strategy",
                strategy,
                "--ttl",
                "30s",
                &k,
                "--",
                "sh",
                "-c",
                &script,
            ],
        );
        let line = wait_for_line(&first, Duration::from_secs(10));
        let (child, t1) = line.trim().split_once(' ').unwrap();
        let (child, t1): (u32, i64) = (child.parse().unwrap(), t1.parse().unwrap());

        // Two minutes ahead: the holder's 30 s lease has lapsed by this clock.
        let script = format!("echo $SQLOCK_FENCING_TOKEN > {}", second.display());
        let next = b
            .command(&[
                "run",
                "--strategy",
                strategy,
                "--wait",
                "5s",
                &k,
                "--",
                "sh",
                "-c",
                &script,
            ])
            .env("LD_PRELOAD", FAKETIME)
            .env("FAKETIME", "+120")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .output()
            .unwrap();
        assert!(next.status.success(), "{strategy}: {}", stderr(&next));
        let t2: i64 = fs::read_to_string(&second).unwrap().trim().parse().unwrap();
        assert!(t2 > t1, "{strategy}: token {t2} after {t1}");

        // Its next renewal (a third of the TTL at most) finds the lease gone.
        assert_eq!(
            wait_exit(&mut holder, Duration::from_secs(25)),
            76,
            "{strategy}: {}",
            b.log(&log)
        );
        assert!(!alive(child), "{strategy}: the command was not stopped");
        assert!(b.log(&log).contains("lost"), "{strategy}: {}", b.log(&log));
    }
}
