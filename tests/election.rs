//! Leader election (`Locker::election`): on every backend, candidates in processes of
//! their own elect one leader at a time, by the history checker; a SIGKILLed leader is
//! replaced within the TTL, a resigning one at once (before its lease would have
//! expired, on the database clock); a leader paused past its TTL is replaced and its
//! fenced writes are refused when it resumes; a follower observes every leader, in
//! order of term. In-process tests cover the API's edges: bad input, a plain lock on
//! an election's key, `lead` cancelling its work at a loss, `lead_until_done`, a
//! follower woken by notifications alone (PostgreSQL), and renewals whose connections
//! are killed, which end neither the process nor the term.
//!
//! The candidates are processes of this very test binary, started with
//! `SQLOCK_ELECTION_CANDIDATE` set, running `candidate_process` alone: it campaigns,
//! then writes fenced rows every 50 ms and prints each outcome as a history event,
//! until SIGTERM (it resigns) or a refused write (it was deposed).
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use common::history::{self, Event, Kind};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use sqlock::{DbPool, Dialect, Error, Leader, Leadership, Locker, LostReason};
use sqlx::Executor;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// What a candidate process is told: dialect, table, election, identity, TTL in ms.
const CANDIDATE: &str = "SQLOCK_ELECTION_CANDIDATE";

/// The candidates' TTL: long beside their polls, so that "before the resigned lease
/// would have expired" tells a resignation from an expiry even on a busy machine.
const TTL: Duration = Duration::from_secs(3);

/// How long any wait of these tests may take before it counts as a failure: a
/// liveness bound, not a timing assertion.
const DEADLINE: Duration = Duration::from_secs(30);

/// The candidates' longest pause between two attempts.
const POLL_MAX: Duration = Duration::from_millis(100);

/// Slack for "within the TTL": the candidates' poll, and a busy machine's scheduling.
const SLACK: Duration = Duration::from_secs(2);

/// The candidate: runs only in a process started by [`spawn_candidate`].
#[tokio::test]
async fn candidate_process() -> anyhow::Result<()> {
    let Ok(spec) = std::env::var(CANDIDATE) else {
        return Ok(());
    };
    let parts: Vec<&str> = spec.split('|').collect();
    let [dialect, table, name, id, ttl_ms] = parts[..] else {
        anyhow::bail!("bad {CANDIDATE}: {spec}");
    };
    let b = common::backends_of(table, &[dialect_of(dialect)])
        .await
        .pop()
        .context("the candidate's backend")?;
    let locker = b
        .builder()
        .await?
        .ttl(Duration::from_millis(ttl_ms.parse()?))
        .poll_interval(Duration::from_millis(10), POLL_MAX)
        // On PostgreSQL, claims and resignations are announced to the follower.
        .notify_waiters(b.dialect == Dialect::Postgres)
        .build()?;
    let election = locker.election(name).id(id);
    let owner = election.locker().owner().to_string();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    println!("READY {owner}");
    let event = |kind, token, sent, ack| Event {
        kind,
        key: election.key().to_owned(),
        owner: owner.clone(),
        token,
        sent,
        ack,
    };
    let sent = history::now();
    let leadership = tokio::select! {
        l = election.campaign() => l?,
        _ = terminate.recv() => return Ok(()),
    };
    let term = leadership.term();
    println!("{}", event(Kind::Grant, term, sent, history::now()).line());
    println!("LEADER {term} {id}");
    let writes = writes_table(&b);
    loop {
        tokio::select! {
            _ = terminate.recv() => {
                let sent = history::now();
                let still = leadership.resign().await?;
                let kind = if still { Kind::Release } else { Kind::ReleaseRefused };
                println!("{}", event(kind, term, sent, history::now()).line());
                println!("RESIGNED {term}");
                return Ok(());
            }
            () = tokio::time::sleep(Duration::from_millis(50)) => {
                let sent = history::now();
                let kind = fenced_write(locker.pool(), &leadership, &writes).await;
                let refused = kind == Kind::Rejected;
                let kind_written = kind == Kind::Write;
                println!("{}", event(kind, term, sent, history::now()).line());
                if refused {
                    println!("DEPOSED {term}");
                    return Ok(());
                }
                if kind_written {
                    println!("WROTE {term}");
                }
            }
        }
    }
}

fn dialect_of(name: &str) -> Dialect {
    match name {
        "postgres" => Dialect::Postgres,
        "mysql" => Dialect::MySql,
        _ => Dialect::Sqlite,
    }
}

fn writes_table(b: &common::Backend) -> String {
    format!("{}_w", b.table)
}

/// `leadership.fence` and an insert of the term in one transaction on `pool`: a
/// committed write, a refused one, or an unknown outcome (another error: on SQLite a
/// write that another process's commit got ahead of is refused as busy).
async fn fenced_write(pool: &DbPool, leadership: &Leadership, table: &str) -> Kind {
    let insert = sqlx::AssertSqlSafe(format!(
        "INSERT INTO {table} (term) VALUES ({})",
        leadership.term()
    ));
    macro_rules! fenced {
        ($p:expr) => {{
            let attempt = async {
                let mut tx = $p.begin().await?;
                match leadership.fence(&mut *tx).await {
                    Ok(()) => {}
                    Err(Error::LeadershipLost { .. }) => return Ok(Kind::Rejected),
                    Err(e) => return Err(anyhow::Error::from(e)),
                }
                tx.execute(insert).await?;
                tx.commit().await?;
                Ok::<_, anyhow::Error>(Kind::Write)
            };
            attempt.await.unwrap_or(Kind::Unknown)
        }};
    }
    match pool {
        DbPool::Postgres(p) => fenced!(p),
        DbPool::MySql(p) => fenced!(p),
        DbPool::Sqlite(p) => fenced!(p),
        _ => Kind::Unknown,
    }
}

/// The database clock now, in microseconds since the epoch.
async fn db_now_us(b: &common::Backend, pool: &DbPool) -> anyhow::Result<i64> {
    let sql = match b.dialect {
        Dialect::Postgres => {
            "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)"
        }
        Dialect::MySql => {
            "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"
        }
        _ => "SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)",
    };
    b.scalar(pool, sql).await
}

/// What the candidates said, line by line, each with the index of its candidate.
struct Said {
    rx: mpsc::UnboundedReceiver<(usize, String)>,
    tx: mpsc::UnboundedSender<(usize, String)>,
    lines: Vec<(usize, String, bool)>,
    events: Vec<Event>,
}

impl Said {
    fn new() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            rx,
            tx,
            lines: Vec::new(),
            events: Vec::new(),
        }
    }

    /// The first line not waited for yet that starts with `word` (from candidate
    /// `from`, if given): its candidate and the rest of the line.
    async fn wait(&mut self, word: &str, from: Option<usize>) -> anyhow::Result<(usize, String)> {
        let prefix = format!("{word} ");
        let deadline = Instant::now() + DEADLINE;
        loop {
            for (idx, line, taken) in &mut self.lines {
                if !*taken && from.is_none_or(|f| f == *idx) && line.starts_with(&prefix) {
                    *taken = true;
                    return Ok((*idx, line[prefix.len()..].to_owned()));
                }
            }
            let (idx, line) = tokio::time::timeout_at(deadline, self.rx.recv())
                .await
                .with_context(|| format!("no {word} line within {DEADLINE:?}"))?
                .context("every candidate ended")?;
            self.take(idx, &line);
        }
    }

    /// Reads whatever the candidates said meanwhile.
    fn drain(&mut self) {
        while let Ok((idx, line)) = self.rx.try_recv() {
            self.take(idx, &line);
        }
    }

    fn take(&mut self, idx: usize, line: &str) {
        // The harness may have begun the line with the test's name.
        for word in [
            "EVENT ",
            "READY ",
            "LEADER ",
            "WROTE ",
            "RESIGNED ",
            "DEPOSED ",
        ] {
            if let Some(at) = line.find(word) {
                let line = &line[at..];
                if let Some(e) = Event::parse(line) {
                    self.events.push(e);
                }
                self.lines.push((idx, line.to_owned(), false));
                return;
            }
        }
    }
}

/// A candidate process; what it says goes to `said`, tagged with `idx`.
fn spawn_candidate(
    b: &common::Backend,
    name: &str,
    idx: usize,
    said: &Said,
) -> anyhow::Result<Child> {
    let dialect = match b.dialect {
        Dialect::Postgres => "postgres",
        Dialect::MySql => "mysql",
        _ => "sqlite",
    };
    let spec = format!("{dialect}|{}|{name}|c{idx}|{}", b.table, TTL.as_millis());
    let mut child = Command::new(std::env::current_exe()?)
        .args([
            "candidate_process",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CANDIDATE, spec)
        .env("SQLOCK_TEST_PARENT_PID", std::process::id().to_string())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().context("the candidate's stdout")?;
    let tx = said.tx.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if tx.send((idx, line)).is_err() {
                return;
            }
        }
    });
    Ok(child)
}

fn signal(child: &Child, sig: Signal) -> anyhow::Result<()> {
    let pid = child.id().context("the candidate has exited")?;
    kill(Pid::from_raw(i32::try_from(pid)?), sig)?;
    Ok(())
}

/// Whether the process is stopped (SIGSTOP), by its state in /proc.
fn stopped(child: &Child) -> anyhow::Result<bool> {
    let pid = child.id().context("the candidate has exited")?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The state follows the command name, which is in parentheses.
    let state = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next())
        .context("the process state")?;
    Ok(state == 'T')
}

/// Waits until the follower reported a leader of `term`; every report on the way is
/// kept in `seen`.
async fn wait_observed(
    rx: &mut mpsc::UnboundedReceiver<Option<Leader>>,
    seen: &mut Vec<Option<Leader>>,
    term: i64,
) -> anyhow::Result<Leader> {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(Some(l)) = seen
            .iter()
            .find(|l| l.as_ref().is_some_and(|l| l.term == term))
        {
            return Ok(l.clone());
        }
        let next = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .with_context(|| format!("the follower did not see term {term}"))?
            .context("the follower ended")?;
        seen.push(next);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidates_in_processes_elect_one_leader_at_a_time() -> anyhow::Result<()> {
    common::on_each(common::backends("election_procs").await, |b| async move {
        let what = b.dialect;
        let admin = b.fresh_table().await?;
        let pool = admin.pool().clone();
        let writes = writes_table(&b);
        b.script(&pool, &format!("DROP TABLE IF EXISTS {writes}"))
            .await?;
        b.script(
            &pool,
            &format!("CREATE TABLE {writes} (term BIGINT NOT NULL)"),
        )
        .await?;
        let name = "procs";

        // A follower in this process, woken by notifications on PostgreSQL.
        let follower = b
            .builder()
            .await?
            .notify_waiters(b.dialect == Dialect::Postgres)
            .build()?
            .election(name)
            .poll_interval(Duration::from_millis(20));
        let (seen_tx, mut seen_rx) = mpsc::unbounded_channel();
        let mut watch = follower.observe();
        let observer = tokio::spawn(async move {
            loop {
                match watch.changed().await {
                    Ok(l) => {
                        if seen_tx.send(l).is_err() {
                            return;
                        }
                    }
                    Err(e) => eprintln!("follower: {e}"),
                }
            }
        });
        let mut seen = Vec::new();

        let mut said = Said::new();
        let mut children: Vec<Child> = (0..3)
            .map(|i| spawn_candidate(&b, name, i, &said))
            .collect::<anyhow::Result<_>>()?;
        for _ in 0..3 {
            said.wait("READY", None).await?;
        }

        // One leads; the follower sees it, with its identity.
        let (first, line) = said.wait("LEADER", None).await?;
        let term1: i64 = line.split(' ').next().context("a term")?.parse()?;
        let l1 = wait_observed(&mut seen_rx, &mut seen, term1).await?;
        assert_eq!(l1.identity, format!("c{first}"), "{what}");

        // Its fenced writes are accepted while it leads.
        said.wait("WROTE", Some(first)).await?;

        // SIGKILLed, it is replaced within the TTL, on the database clock.
        signal(&children[first], Signal::SIGKILL)?;
        let status = children[first].wait().await?;
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9),
            "{what}: the kill did not take"
        );
        let killed_at = db_now_us(&b, &pool).await?;
        let (second, line) = said.wait("LEADER", None).await?;
        assert_ne!(second, first, "{what}");
        let term2: i64 = line.split(' ').next().context("a term")?.parse()?;
        assert!(term2 > term1, "{what}: term {term2} after {term1}");
        let l2 = wait_observed(&mut seen_rx, &mut seen, term2).await?;
        let bound = killed_at + i64::try_from((TTL + SLACK).as_micros())?;
        assert!(
            l2.since.timestamp_micros() <= bound,
            "{what}: the next leader came {} µs after the kill, the TTL is {TTL:?}",
            l2.since.timestamp_micros() - killed_at
        );

        // A resignation lets the third in at once: before the resigned lease would
        // have expired.
        said.wait("WROTE", Some(second)).await?;
        let before = follower.leader().await?.context("a leader")?;
        assert_eq!(before.term, term2, "{what}");
        signal(&children[second], Signal::SIGTERM)?;
        said.wait("RESIGNED", Some(second)).await?;
        assert!(children[second].wait().await?.success(), "{what}");
        let (third, line) = said.wait("LEADER", None).await?;
        let term3: i64 = line.split(' ').next().context("a term")?.parse()?;
        assert!(term3 > term2, "{what}");
        let l3 = wait_observed(&mut seen_rx, &mut seen, term3).await?;
        assert!(
            l3.since < before.expires_at,
            "{what}: term {term3} began at {}, not before the resigned lease's expiry {}",
            l3.since,
            before.expires_at
        );

        // Paused past its TTL, the leader is replaced; resumed, its fenced write is
        // refused.
        said.wait("WROTE", Some(third)).await?;
        children.push(spawn_candidate(&b, name, 3, &said)?);
        said.wait("READY", Some(3)).await?;
        signal(&children[third], Signal::SIGSTOP)?;
        let deadline = Instant::now() + DEADLINE;
        while !stopped(&children[third])? {
            assert!(Instant::now() < deadline, "{what}: the pause did not take");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (fourth, line) = said.wait("LEADER", None).await?;
        assert_eq!(fourth, 3, "{what}");
        let term4: i64 = line.split(' ').next().context("a term")?.parse()?;
        // Still paused when the next leader was granted: the pause outlasted the lease.
        assert!(
            stopped(&children[third])?,
            "{what}: the leader resumed too early"
        );
        assert!(term4 > term3, "{what}");
        wait_observed(&mut seen_rx, &mut seen, term4).await?;
        signal(&children[third], Signal::SIGCONT)?;
        said.wait("DEPOSED", Some(third)).await?;
        said.wait("WROTE", Some(fourth)).await?;
        signal(&children[fourth], Signal::SIGTERM)?;
        said.wait("RESIGNED", Some(fourth)).await?;
        for c in &mut children {
            let _ = c.kill().await;
        }
        observer.abort();
        said.drain();

        // The history: one leader at a time, terms rising, no valid lease taken over,
        // no fenced write of a deposed leader accepted.
        let verdict = history::check_leases(&said.events, TTL);
        assert!(
            verdict.violations.is_empty(),
            "{what}: {verdict}\n{}",
            verdict.violations.join("\n")
        );
        assert_eq!(verdict.grants, 4, "{what}: {verdict}");
        assert!(verdict.writes >= 4, "{what}: {verdict}");
        let deposed_owner = said
            .events
            .iter()
            .find(|e| e.kind == Kind::Grant && e.token == term3)
            .map(|e| e.owner.clone())
            .context("the paused leader's grant")?;
        assert!(
            said.events
                .iter()
                .any(|e| e.kind == Kind::Rejected && e.owner == deposed_owner),
            "{what}: the paused leader's write was not refused"
        );
        // The follower saw every leader, in order of term.
        let terms: Vec<i64> = seen.iter().flatten().map(|l| l.term).collect();
        assert_eq!(terms, [term1, term2, term3, term4], "{what}: {seen:?}");
        println!("{what}: {verdict}; the follower saw terms {terms:?}");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn campaign_resign_and_observe() -> anyhow::Result<()> {
    for b in common::backends("election_api").await {
        let what = b.dialect;
        let locker = b.fresh_table().await?;
        let a = locker.election("api").id("a:1");
        let c = locker.election("api").id("c:1");
        assert_eq!(a.key(), "election:api");
        assert!(a.leader().await?.is_none(), "{what}");

        let la = a.try_campaign().await?.expect("a leads");
        assert!(c.try_campaign().await?.is_none(), "{what}");
        let seen = c.leader().await?.expect("a leader");
        assert_eq!((seen.identity.as_str(), seen.term), ("a:1", la.term()));
        assert_eq!(seen.owner, la.owner().to_string());
        assert!(matches!(
            c.campaign_timeout(Duration::from_millis(100)).await,
            Err(Error::Timeout { .. })
        ));

        // Resigned, the next candidate gets in at once, with a higher term.
        assert!(la.resign().await?, "{what}");
        assert!(a.leader().await?.is_none(), "{what}");
        let lc = c.try_campaign().await?.expect("c leads");
        assert!(lc.term() > seen.term, "{what}");
        assert_eq!(c.leader().await?.map(|l| l.identity), Some("c:1".into()));

        // The default identity is the candidate's owner id.
        let d = locker.election("api-default");
        let ld = d.campaign().await?;
        assert_eq!(ld.identity(), d.locker().owner().to_string());
        drop(ld);
        drop(lc);
    }
    Ok(())
}

#[tokio::test]
async fn bad_names_and_identities_are_refused_before_sql() -> anyhow::Result<()> {
    // No table at all: nothing may reach the database.
    let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
    let locker = Locker::new(pool)?;
    let long = "n".repeat(sqlock::MAX_ELECTION_NAME_BYTES + 1);
    for name in ["", long.as_str(), "a\0b"] {
        let e = locker.election(name);
        assert!(matches!(
            e.try_campaign().await,
            Err(Error::EmptyKey | Error::KeyTooLong { .. } | Error::KeyContainsNul)
        ));
        assert!(matches!(
            e.leader().await,
            Err(Error::EmptyKey | Error::KeyTooLong { .. } | Error::KeyContainsNul)
        ));
    }
    let longest = "n".repeat(sqlock::MAX_ELECTION_NAME_BYTES);
    assert!(matches!(
        locker.election(&longest).leader().await,
        Err(Error::MissingTable { .. })
    ));
    let long_id = "i".repeat(sqlock::MAX_IDENTITY_BYTES + 1);
    for id in ["", long_id.as_str(), "x\0y"] {
        assert!(matches!(
            locker.election("ok").id(id).try_campaign().await,
            Err(Error::InvalidIdentity { .. })
        ));
    }
    let mut watch = locker
        .election("ok")
        .poll_interval(Duration::ZERO)
        .observe();
    assert!(matches!(
        watch.changed().await,
        Err(Error::InvalidSettings(_))
    ));
    Ok(())
}

/// An election key is a lease key: a plain lock on it excludes the candidates, and is
/// no leader; a candidate's lease excludes a plain lock.
#[tokio::test]
async fn a_plain_lock_on_an_election_key_is_no_leader() -> anyhow::Result<()> {
    for b in common::backends("election_plain").await {
        let what = b.dialect;
        let locker = b.fresh_table().await?;
        let election = locker.election("plain");
        let plain = locker.new_handle();
        let g = plain.try_acquire(election.key()).await?.expect("free");
        assert!(election.try_campaign().await?.is_none(), "{what}");
        assert!(election.leader().await?.is_none(), "{what}");
        assert!(g.release().await?);
        let l = election.try_campaign().await?.expect("free again");
        assert!(plain.try_acquire(election.key()).await?.is_none(), "{what}");
        assert_eq!(election.leader().await?.map(|x| x.term), Some(l.term()));
        assert!(l.resign().await?);
    }
    Ok(())
}

/// `lead` drops the work at the loss and says so; `lead_until_done` campaigns again
/// and runs the work anew in the next term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lead_cancels_the_work_when_leadership_is_lost() -> anyhow::Result<()> {
    for b in common::backends("election_lead").await {
        let what = b.dialect;
        let admin = b.fresh_table().await?;
        let locker = b
            .builder()
            .await?
            .ttl(Duration::from_millis(600))
            .poll_interval(Duration::from_millis(10), Duration::from_millis(50))
            .build()?;
        let election = locker.election("lead");
        let key = election.key();

        // An operator releases the key: the renewal finds it lost, the work is dropped.
        let (started_tx, mut started_rx) = mpsc::unbounded_channel();
        let lead = {
            let election = election.clone();
            tokio::spawn(async move {
                election
                    .lead(|term| async move {
                        let _ = started_tx.send(term.term());
                        std::future::pending::<()>().await
                    })
                    .await
            })
        };
        let first_term = tokio::time::timeout(DEADLINE, started_rx.recv())
            .await?
            .context("the work started")?;
        assert!(admin.force_release_now(key).await?, "{what}");
        let outcome = tokio::time::timeout(DEADLINE, lead).await??;
        match outcome {
            Err(Error::LeadershipLost {
                term: lost, reason, ..
            }) => {
                assert_eq!(lost, first_term, "{what}");
                assert_eq!(reason, LostReason::NotHeld, "{what}");
            }
            other => panic!("{what}: {other:?}"),
        }

        // Again, campaigning again: the second term's work completes.
        let (started_tx, mut started_rx) = mpsc::unbounded_channel();
        let runs = Arc::new(AtomicUsize::new(0));
        let again = {
            let election = election.clone();
            tokio::spawn(async move {
                election
                    .lead_until_done(move |t| {
                        let (started_tx, runs) = (started_tx.clone(), runs.clone());
                        async move {
                            let _ = started_tx.send(t.term());
                            // The first term's work runs until it is dropped.
                            if runs.fetch_add(1, Ordering::SeqCst) == 0 {
                                std::future::pending::<()>().await;
                            }
                            t.term()
                        }
                    })
                    .await
            })
        };
        let first = tokio::time::timeout(DEADLINE, started_rx.recv())
            .await?
            .context("the first term")?;
        assert!(admin.force_release_now(key).await?, "{what}");
        let last = tokio::time::timeout(DEADLINE, again).await???;
        assert!(last > first, "{what}: term {last} after {first}");
        assert!(
            election.leader().await?.is_none(),
            "{what}: resigned after the work"
        );
    }
    Ok(())
}

/// On PostgreSQL, with `notify_waiters` on both sides, a follower whose poll period is
/// an hour learns of a new term and of a resignation all the same: by notification.
#[tokio::test]
async fn a_follower_is_woken_by_notifications_on_postgres() -> anyhow::Result<()> {
    for b in common::backends_of("election_notify", &[Dialect::Postgres]).await {
        b.fresh_table().await?;
        let handle = |b: common::Backend| async move {
            anyhow::Ok(b.builder().await?.notify_waiters(true).build()?)
        };
        let follower = handle(b.clone())
            .await?
            .election("notify")
            .poll_interval(Duration::from_secs(3600));
        let candidate = handle(b.clone()).await?.election("notify").id("n:1");
        let mut watch = follower.observe();
        assert!(watch.changed().await?.is_none());
        let (saw_tx, mut saw_rx) = mpsc::unbounded_channel();
        let next = tokio::spawn(async move {
            let leader = watch.changed().await?;
            let _ = saw_tx.send(leader.clone());
            let gone = watch.changed().await?;
            anyhow::Ok((leader, gone))
        });
        let leadership = candidate.campaign().await?;
        let term = leadership.term();
        // Resign only once the follower saw the term, so that it sees both changes.
        let seen = tokio::time::timeout(DEADLINE, saw_rx.recv())
            .await?
            .context("the follower ended")?;
        assert_eq!(
            seen.map(|l| (l.term, l.identity)),
            Some((term, "n:1".into()))
        );
        assert!(leadership.resign().await?);
        let (_, gone) = tokio::time::timeout(DEADLINE, next).await???;
        assert!(gone.is_none());
    }
    Ok(())
}

/// A renewal that fails (its connection killed on the server) is retried on a new
/// connection: the leader's process goes on, and so does its term, unless the lease
/// may have lapsed. The servers only: the kills end this test's own connections.
#[tokio::test]
async fn failed_renewals_end_neither_the_process_nor_the_term() -> anyhow::Result<()> {
    const KILL: common::kill::Killable = common::kill::Killable {
        name: "sqlock_el_kill",
        max_connections: 1,
        ping: false,
        idle_timeout_s: None,
    };
    for b in common::servers("election_kill").await {
        let what = b.dialect;
        b.fresh_table().await?;
        let admin = b.pool().await?;
        let leader = Locker::builder(common::kill::pool(&b, KILL).await?)
            .table(&b.table)
            .build()?
            .election("kill")
            .ttl(Duration::from_secs(3));
        let other = b.locker().await?.election("kill");
        let leadership = leader.campaign().await?;
        let stats = || leader.locker().watchdog_stats();
        // Each kill is followed by a renewal on a new connection before the next, so
        // that renewals never fail for a whole TTL (that loss would be a true one).
        let mut killed = 0;
        for _ in 0..3 {
            let before = stats();
            killed += common::kill::kill(&b, &admin, KILL.name).await?;
            let deadline = Instant::now() + DEADLINE;
            while stats().renewed <= before.renewed {
                assert!(
                    Instant::now() < deadline,
                    "{what}: renewals did not recover"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let s = stats();
        assert!(killed > 0, "{what}: nothing was killed");
        assert!(
            s.failed_ticks > 0,
            "{what}: the kills never hit a renewal: {s:?}"
        );
        assert!(!leadership.is_lost(), "{what}: a false loss");
        assert!(
            other.try_campaign().await?.is_none(),
            "{what}: the term lapsed"
        );
        let seen = other.leader().await?.context("a leader")?;
        assert_eq!(seen.term, leadership.term(), "{what}");
        assert!(leadership.resign().await?, "{what}");
    }
    Ok(())
}
