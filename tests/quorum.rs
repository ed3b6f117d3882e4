//! The quorum lock (`sqlock::Quorum`) over three independent databases: a SQLite file,
//! PostgreSQL and MariaDB (three SQLite files on the quick path without servers).
//!
//! What it promises, tried: one holder at a time among owners contending, with a
//! fencing token that rises across the databases, also as the majority that grants
//! changes; granted and kept alive with one database down; a clear error, and nothing
//! held anywhere, with two down; a database whose token table is missing counts as
//! down; busy on a majority is busy (another primitive on the name included), and
//! leaves nothing on the rest; not reentrant;
//! lost once a second lease of three is; a paused holder past its TTL is fenced out
//! by its token; a PostgreSQL server restarted under a holder keeps its grant (the
//! fault instance, `scripts/fault-db.sh`); a member behind PgBouncer in transaction
//! pooling; two applications whose PostgreSQL members share a table name in two
//! schemas hold one name apart. Across processes, under faults:
//! `tests/quorum_processes.rs`.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Backend;
use sqlock::{Dialect, Error, Locker, Quorum};

/// A bound for what should take far less, so that a broken build fails rather than
/// hangs. Not a timing assertion.
const LIVENESS: Duration = Duration::from_secs(30);

/// Three independent databases for the test `name`: a SQLite file, PostgreSQL and
/// MariaDB, each with a fresh table of its own; a SQLite file of its own in place of
/// a server that is left out (the quick path).
async fn databases(name: &str) -> Vec<Backend> {
    let mut out = common::backends_of(&format!("{name}_0"), &[Dialect::Sqlite]).await;
    for (i, server) in [Dialect::Postgres, Dialect::MySql].into_iter().enumerate() {
        let table = format!("{name}_{}", i + 1);
        let mut found = common::backends_of(&table, &[server]).await;
        if found.is_empty() {
            found = common::backends_of(&table, &[Dialect::Sqlite]).await;
        }
        out.extend(found);
    }
    assert_eq!(out.len(), 3);
    out
}

/// A handle on each database, on its fresh table.
async fn lockers(dbs: &[Backend]) -> anyhow::Result<Vec<Locker>> {
    let mut out = Vec::new();
    for b in dbs {
        out.push(b.fresh_table().await?);
    }
    Ok(out)
}

/// A handle on a database that is down: a PostgreSQL pool on a loopback port nothing
/// listens on, which connects lazily and so fails each attempt.
fn down() -> anyhow::Result<Locker> {
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0")?;
        probe.local_addr()?.port()
    };
    let pool = sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(Duration::from_secs(2))
        .connect_lazy(&format!("postgres://postgres@127.0.0.1:{port}/test"))?;
    Ok(Locker::new(pool)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_holder_at_a_time_with_tokens_that_rise() -> anyhow::Result<()> {
    let dbs = databases("quorum_one").await;
    let quorum = Quorum::new(lockers(&dbs).await?)?;
    let inside = Arc::new(AtomicBool::new(false));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let owner = quorum.new_handle();
        let (inside, tokens, overlaps) = (inside.clone(), tokens.clone(), overlaps.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let guard = owner
                    .lock("shared-job")
                    .ttl(Duration::from_secs(10))
                    .timeout(LIVENESS)
                    .acquire()
                    .await?;
                if inside.swap(true, Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokens.lock().unwrap().push(guard.fencing_token());
                tokio::time::sleep(Duration::from_millis(3)).await;
                inside.store(false, Ordering::SeqCst);
                anyhow::ensure!(guard.held() >= 2, "held on {} databases", guard.held());
                anyhow::ensure!(guard.release().await?, "released while held");
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
    let tokens = tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), 20);
    // Recorded in the order of the grants, one holder at a time: each token higher
    // than every one before it, though no database's own sequence spans the others.
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "quorum tokens do not rise: {tokens:?}"
    );
    // The last token was written to a majority before its grant was reported (a
    // round that raised a database's token and then lost may leave it higher there).
    let last = *tokens.last().unwrap();
    let mut recorded = Vec::new();
    for m in quorum.members() {
        recorded.push(m.quorum_token("shared-job").await?);
    }
    assert!(
        recorded.iter().filter(|&&t| t >= last).count() >= quorum.majority(),
        "token {last} recorded on fewer than a majority: {recorded:?}"
    );
    assert_eq!(quorum.members()[0].quorum_token("never-locked").await?, 0);
    Ok(())
}

#[tokio::test]
async fn one_database_down_still_grants_and_renews() -> anyhow::Result<()> {
    let dbs = databases("quorum_down1").await;
    let mut members = lockers(&dbs[..2]).await?;
    members.push(down()?);
    let quorum = Quorum::new(members)?;
    let ttl = Duration::from_millis(1500);
    let guard = quorum
        .lock("job")
        .ttl(ttl)
        .try_acquire()
        .await?
        .expect("granted by two databases of three");
    // The fault took: the database that is down holds no part of it.
    assert_eq!(guard.members(), [0, 1]);
    assert_eq!(guard.held(), 2);
    let token = guard.fencing_token();
    // Held past three TTLs: the two leases are renewed (their expiry in each database
    // moves past the first), and nobody else takes it.
    let expiry = |quorum: &Quorum| {
        let members = quorum.members()[..2].to_vec();
        async move {
            let mut out = Vec::new();
            for m in members {
                out.push(m.lock_info("job").await?.expect("held").expires_at);
            }
            anyhow::Ok(out)
        }
    };
    let first = expiry(&quorum).await?;
    tokio::time::sleep(ttl * 3).await;
    assert!(!guard.is_lost(), "{:?}", guard.lost_reason());
    let later = expiry(&quorum).await?;
    assert!(
        later.iter().zip(&first).all(|(l, f)| l > f),
        "the leases were not renewed: {first:?} then {later:?}"
    );
    let other = quorum.new_handle();
    assert!(other.lock("job").ttl(ttl).try_acquire().await?.is_none());
    assert!(guard.release().await?);
    let next = other
        .lock("job")
        .ttl(ttl)
        .try_acquire()
        .await?
        .expect("free once released");
    assert!(next.fencing_token() > token);
    assert!(next.release().await?);
    Ok(())
}

#[tokio::test]
async fn two_databases_down_is_a_clear_error_and_holds_nothing() -> anyhow::Result<()> {
    let dbs = databases("quorum_down2").await;
    let up = dbs[0].fresh_table().await?;
    let quorum = Quorum::new([up.clone(), down()?, down()?])?;
    // Each database gets 600 ms (a tenth of the TTL) to answer.
    let ttl = Duration::from_secs(6);
    match quorum.lock("job").ttl(ttl).try_acquire().await {
        Err(Error::QuorumUnreachable {
            answered, needed, ..
        }) => assert_eq!((answered, needed), (1, 2)),
        other => panic!("a single try: {other:?}"),
    }
    // Without a timeout, a wait on databases that are gone answers at once.
    assert!(matches!(
        quorum.lock("job").ttl(ttl).acquire().await,
        Err(Error::QuorumUnreachable { answered: 1, .. })
    ));
    let started = tokio::time::Instant::now();
    let waited = quorum
        .lock("job")
        .ttl(ttl)
        .timeout(Duration::from_millis(1500))
        .acquire()
        .await;
    match waited {
        Err(e @ Error::QuorumUnreachable { .. }) => {
            let message = e.to_string();
            assert!(
                message.contains("1 of its 3 databases answered"),
                "{message}"
            );
        }
        other => panic!("at the deadline: {other:?}"),
    }
    assert!(started.elapsed() < LIVENESS);
    // Nothing is left held on the database that answered: another owner takes the key
    // there at once (a lease left behind would keep it busy for its 6 s TTL).
    let other = up.new_handle();
    let plain = other.try_acquire("job").await?;
    assert!(plain.is_some(), "a lease was left behind");
    Ok(())
}

#[tokio::test]
async fn busy_on_a_majority_is_busy_and_leaves_nothing_behind() -> anyhow::Result<()> {
    let dbs = databases("quorum_busy").await;
    let members = lockers(&dbs).await?;
    // Another owner holds the key, plainly, on two databases of three.
    let blockers: Vec<Locker> = members[..2].iter().map(Locker::new_handle).collect();
    let mut held = Vec::new();
    for b in &blockers {
        held.push(b.try_acquire("job").await?.expect("free"));
    }
    let quorum = Quorum::new(members.clone())?;
    assert!(quorum.lock("job").try_acquire().await?.is_none());
    // What the round took on the third was given back before it answered.
    let third = members[2].new_handle();
    assert!(
        third.try_acquire("job").await?.is_some(),
        "the third kept a lease"
    );
    // With one of the two released, the quorum has a majority again.
    let first = held.remove(0);
    assert!(first.release().await?);
    drop(third);
    let guard = tokio::time::timeout(LIVENESS, async {
        loop {
            if let Some(g) = quorum.lock("job").try_acquire().await? {
                return anyhow::Ok(g);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await??;
    assert_eq!(guard.members(), [0, 2]);
    assert!(guard.release().await?);
    Ok(())
}

#[tokio::test]
async fn a_paused_holder_past_its_ttl_is_fenced_out_by_its_token() -> anyhow::Result<()> {
    let dbs = databases("quorum_paused").await;
    let members = lockers(&dbs).await?;
    // The paused holder's handles renew nothing: its leases lapse at their TTL, as a
    // holder stopped by the operating system would let them.
    let mut paused = Vec::new();
    for b in &dbs {
        paused.push(b.builder().await?.auto_renew(false).build()?);
    }
    let paused = Quorum::new(paused)?;
    let ttl = Duration::from_secs(1);
    let early = paused
        .lock("ledger")
        .ttl(ttl)
        .server_timeout(Duration::from_millis(300))
        .try_acquire()
        .await?
        .expect("free");
    tokio::time::sleep(ttl * 2).await;

    let later = Quorum::new(members)?;
    let late = later
        .lock("ledger")
        .ttl(Duration::from_secs(10))
        .timeout(LIVENESS)
        .acquire()
        .await?;
    assert!(late.fencing_token() > early.fencing_token());

    // The resource keeps the highest token it accepted a write with, and refuses lower
    // ones: the later holder writes, then the paused one wakes and tries.
    let resource = Mutex::new(0i64);
    let write = |token: i64| {
        let mut highest = resource.lock().unwrap();
        if token < *highest {
            return false;
        }
        *highest = token;
        true
    };
    assert!(write(late.fencing_token()));
    assert!(
        !write(early.fencing_token()),
        "the paused holder's write went through"
    );
    assert!(late.release().await?);
    drop(early);
    Ok(())
}

#[tokio::test]
async fn tokens_rise_as_the_granting_majority_changes() -> anyhow::Result<()> {
    let dbs = databases("quorum_majorities").await;
    let members = lockers(&dbs).await?;
    // The databases' own fencing sequences far apart: the first one's well ahead.
    for _ in 0..5 {
        let g = members[0].try_acquire("elsewhere").await?.expect("free");
        assert!(g.release().await?);
    }
    let quorum = Quorum::new(members.clone())?;
    let mut tokens = Vec::new();
    // Each grant on another majority: the database left out is held by another owner.
    for round in 0..6 {
        let out = round % 3;
        let blocker = members[out].new_handle();
        let block = blocker.try_acquire("job").await?.expect("free");
        let guard = quorum
            .lock("job")
            .try_acquire()
            .await?
            .expect("two are free");
        let expected: Vec<usize> = (0..3).filter(|m| *m != out).collect();
        assert_eq!(guard.members(), expected.as_slice(), "round {round}");
        tokens.push(guard.fencing_token());
        assert!(guard.release().await?);
        assert!(block.release().await?);
    }
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "quorum tokens do not rise across majorities: {tokens:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_quorum_is_not_reentrant() -> anyhow::Result<()> {
    let dbs = databases("quorum_reentry").await;
    let quorum = Quorum::new(lockers(&dbs).await?)?;
    let first = quorum.lock("job").try_acquire().await?.expect("free");
    // A clone is the same owner: busy while the first holds, and nothing left behind.
    let same = quorum.clone();
    assert!(same.lock("job").try_acquire().await?.is_none());
    let token = first.fencing_token();
    assert!(first.release().await?);
    let next = same
        .lock("job")
        .try_acquire()
        .await?
        .expect("free once released");
    assert!(next.fencing_token() > token);
    assert_eq!(next.held(), 3);
    assert!(next.release().await?);
    // Free on every database: the re-entered holds were given back.
    for m in quorum.members() {
        assert!(m.new_handle().try_acquire("job").await?.is_some());
    }
    Ok(())
}

#[tokio::test]
async fn a_database_without_its_token_table_counts_as_down() -> anyhow::Result<()> {
    let dbs = databases("quorum_notable").await;
    let members = lockers(&dbs).await?;
    let drop_tokens = |b: &Backend| {
        let table = format!("{}_quorum", b.table);
        match b.dialect {
            Dialect::MySql => format!("DROP TABLE IF EXISTS `{table}`"),
            _ => format!("DROP TABLE IF EXISTS \"{table}\""),
        }
    };
    dbs[2]
        .script(members[2].pool(), &drop_tokens(&dbs[2]))
        .await?;
    let quorum = Quorum::new(members.clone())?;
    let guard = quorum
        .lock("job")
        .try_acquire()
        .await?
        .expect("two databases have it");
    assert_eq!(guard.members(), [0, 1]);
    assert!(guard.release().await?);
    dbs[1]
        .script(members[1].pool(), &drop_tokens(&dbs[1]))
        .await?;
    match quorum.lock("job").try_acquire().await {
        Err(Error::QuorumUnreachable {
            answered, failure, ..
        }) => {
            assert_eq!(answered, 1);
            assert!(failure.starts_with("database "), "{failure}");
        }
        other => panic!("one database with its table: {other:?}"),
    }
    // Nothing held anywhere after the error.
    for m in &members {
        assert!(m.new_handle().try_acquire("job").await?.is_some());
    }
    Ok(())
}

#[tokio::test]
async fn lost_once_fewer_than_a_majority_hold() -> anyhow::Result<()> {
    let dbs = databases("quorum_lost").await;
    let members = lockers(&dbs).await?;
    let quorum = Quorum::new(members.clone())?;
    let guard = quorum
        .lock("job")
        .ttl(Duration::from_millis(900))
        .try_acquire()
        .await?
        .expect("free");
    let mut lost = guard.lost();
    // An operator frees the key on one database: its lease's next renewal finds it
    // gone, and the quorum still holds on two.
    assert!(members[0].force_release_now("job").await?);
    let mut first = guard
        .leases()
        .find(|(m, _)| *m == 0)
        .map(|(_, l)| l.lost())
        .unwrap();
    tokio::time::timeout(LIVENESS, first.wait()).await?;
    assert_eq!(guard.held(), 2);
    assert!(!guard.is_lost());
    assert!(!lost.is_lost());
    // A second: fewer than a majority, and the signal fires.
    assert!(members[1].force_release_now("job").await?);
    tokio::time::timeout(LIVENESS, lost.wait()).await?;
    assert!(guard.is_lost());
    assert!(guard.lost_reason().is_some());
    assert!(
        !guard.release().await?,
        "a lost quorum lock released as held"
    );
    Ok(())
}

#[tokio::test]
async fn bad_input_is_refused_before_any_sql() -> anyhow::Result<()> {
    let dbs = databases("quorum_input").await;
    let members = lockers(&dbs).await?;
    match Quorum::new(members[..2].to_vec()) {
        Err(Error::QuorumTooSmall { members: 2, min: 3 }) => {}
        other => panic!("two members: {other:?}"),
    }
    // Down databases answer nothing: any SQL sent would fail otherwise than these.
    let quorum = Quorum::new([down()?, down()?, down()?])?;
    assert!(matches!(
        quorum.lock("").try_acquire().await,
        Err(Error::EmptyKey)
    ));
    assert!(matches!(
        quorum
            .lock("k")
            .ttl(Duration::from_millis(1))
            .try_acquire()
            .await,
        Err(Error::TtlTooShort { .. })
    ));
    assert!(matches!(
        quorum
            .lock("k")
            .ttl(Duration::from_secs(3))
            .server_timeout(Duration::from_secs(1))
            .try_acquire()
            .await,
        Err(Error::InvalidSettings(_))
    ));
    assert!(matches!(
        quorum.members()[0].quorum_token("").await,
        Err(Error::EmptyKey)
    ));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restarted_under_a_holder_keeps_its_grant() -> anyhow::Result<()> {
    let fault: Vec<Backend> = common::fault_servers("quorum_restart")
        .await
        .into_iter()
        .filter(|b| b.dialect == Dialect::Postgres)
        .collect();
    let Some(fault) = fault.first() else {
        eprintln!("NOTE: the fault instance of PostgreSQL is unreachable: nothing to restart");
        return Ok(());
    };
    let dbs = databases("quorum_restart").await;
    let mut members = lockers(&dbs[..2]).await?;
    // Its pool waits through the restart rather than failing at once.
    let restarted = fault.fresh_table().await?;
    members.insert(0, restarted.clone());
    let quorum = Quorum::new(members)?;
    let ttl = Duration::from_secs(20);
    let guard = quorum
        .lock("job")
        .ttl(ttl)
        .try_acquire()
        .await?
        .expect("free");
    assert_eq!(guard.held(), 3);
    // When the server last started, in microseconds since the epoch.
    let started_at = || async {
        let pool = fault.pool().await?;
        let sql = "SELECT CAST(EXTRACT(EPOCH FROM pg_postmaster_start_time()) * 1000000 AS BIGINT)";
        fault.scalar(&pool, sql).await
    };
    let before = started_at().await?;
    common::fault_db("postgres", "stop").await?;
    common::fault_db("postgres", "start").await?;
    let after = started_at().await?;
    // The fault took: the server is a new one.
    assert_ne!(before, after, "the server did not restart");
    // Its committed lease survived the restart: another owner finds the key busy on
    // all three databases, the restarted one included.
    let other = quorum.new_handle();
    assert!(other.lock("job").ttl(ttl).try_acquire().await?.is_none());
    assert!(
        fault.locker().await?.try_acquire("job").await?.is_none(),
        "the restarted database forgot its lease"
    );
    assert!(!guard.is_lost(), "{:?}", guard.lost_reason());
    let token = guard.fencing_token();
    assert!(guard.release().await?);
    let next = tokio::time::timeout(LIVENESS, async {
        loop {
            // The restarted database's pooled connections fail once each, then
            // reconnect: a round meanwhile may find too few databases answering, or
            // grant on two (given back, so that the release below meets all three).
            if let Ok(Some(g)) = other.lock("job").ttl(ttl).try_acquire().await {
                if g.held() == 3 {
                    return g;
                }
                let _ = g.release().await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await?;
    assert!(next.fencing_token() > token);
    // Released with the restarted database down again: the two others confirm it,
    // which is the answer, whatever the one down says.
    common::fault_db("postgres", "stop").await?;
    let released = next.release().await;
    common::fault_db("postgres", "start").await?;
    assert!(released?, "a majority's release was not the answer");
    Ok(())
}

#[tokio::test]
async fn another_primitive_on_the_name_keeps_its_database_busy() -> anyhow::Result<()> {
    let dbs = databases("quorum_one_name").await;
    let members = lockers(&dbs).await?;
    // Other primitives hold the name on two databases of three: a read of the
    // read-write lock of that name on the first, a permit of the semaphore of that
    // name on the second.
    let read = members[0]
        .new_handle()
        .read_lock("job")
        .try_acquire()
        .await?
        .expect("free");
    let permit = members[1]
        .new_handle()
        .semaphore("job", 2)
        .try_acquire()
        .await?
        .expect("free");
    let quorum = Quorum::new(members.clone())?;
    assert!(quorum.lock("job").try_acquire().await?.is_none());
    // The round's lease on the third was given back.
    let third = members[2].new_handle().try_acquire("job").await?;
    let third = third.expect("the third kept a lease");
    assert!(third.release().await?);
    assert!(read.release().await?);
    let guard = quorum
        .lock("job")
        .try_acquire()
        .await?
        .expect("two are free");
    assert_eq!(guard.members(), [0, 2]);
    assert!(guard.release().await?);
    assert!(permit.release().await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_behind_a_transaction_pooler() -> anyhow::Result<()> {
    let pooled = common::ha_server(
        "quorum_pgbouncer",
        Dialect::Postgres,
        "SQLOCK_TEST_PGBOUNCER_URL",
        "postgres://postgres@127.0.0.1:6433/test",
    )
    .await;
    let Some(pooled) = pooled.first() else {
        eprintln!("NOTE: PgBouncer is unreachable: nothing to pool");
        return Ok(());
    };
    pooled.fresh_table().await?;
    // The pool an application has behind PgBouncer: its own pings off.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(10))
        .test_before_acquire(false)
        .connect(pooled.url())
        .await?;
    let through = Locker::builder(pool)
        .table(&pooled.table)
        .transaction_pooling(true)
        .build()?;
    // The other two: a SQLite file and MariaDB (a second SQLite file without it); the
    // main PostgreSQL stands behind the pooler.
    let dbs = databases("quorum_pgbouncer").await;
    let mut members = vec![through];
    members.push(dbs[0].fresh_table().await?);
    members.push(dbs[2].fresh_table().await?);
    let quorum = Quorum::new(members)?;
    let ttl = Duration::from_millis(1500);
    let mut last = 0;
    for round in 0..4 {
        let owner = quorum.new_handle();
        let guard = owner
            .lock("pooled")
            .ttl(ttl)
            .try_acquire()
            .await?
            .expect("free");
        // The pooled member took its part: every statement of the grant, the token's
        // read and raise included, went through the pooler.
        assert_eq!(guard.held(), 3, "round {round}");
        assert!(guard.fencing_token() > last, "round {round}");
        last = guard.fencing_token();
        if round == 0 {
            // Renewed through the pooler past two TTLs.
            tokio::time::sleep(ttl * 2).await;
            assert!(!guard.is_lost(), "{:?}", guard.lost_reason());
            assert_eq!(guard.held(), 3);
        }
        assert!(guard.release().await?);
    }
    assert_eq!(quorum.members()[0].quorum_token("pooled").await?, last);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_applications_in_two_schemas_hold_one_name_apart() -> anyhow::Result<()> {
    use std::str::FromStr;
    let pg = common::backends_of("quorum_schemas", &[Dialect::Postgres]).await;
    let Some(pg) = pg.first() else {
        eprintln!("NOTE: PostgreSQL is left out: no schemas to share");
        return Ok(());
    };
    let admin = pg.pool().await?;
    // Two applications, each a quorum whose PostgreSQL member has its tables, of the
    // same name, in a schema of its own (found along the connections' search_path),
    // with presence on; their other members are their own.
    let mut quorums = Vec::new();
    for app in ["a", "b"] {
        let schema = format!("quorum_schemas_{app}");
        let sql = format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}");
        pg.script(&admin, &sql).await?;
        let options = sqlx::postgres::PgConnectOptions::from_str(pg.url())?
            .options([("search_path", schema.as_str())]);
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await?;
        let member = Locker::builder(pool)
            .table("quorum_schemas")
            .presence(true)
            .build()?;
        member.create_table().await?;
        let dbs = databases(&format!("quorum_schemas_{app}")).await;
        let mut members = vec![member];
        members.push(dbs[0].fresh_table().await?);
        members.push(dbs[2].fresh_table().await?);
        quorums.push(Quorum::new(members)?);
    }
    let (a, b) = (&quorums[0], &quorums[1]);
    let ttl = Duration::from_secs(10);
    // Application a holds the name, a few grants on: its tokens are past b's.
    for _ in 0..3 {
        let g = a
            .lock("job")
            .ttl(ttl)
            .try_acquire()
            .await?
            .expect("free in a");
        assert!(g.release().await?);
    }
    let held_a = a
        .lock("job")
        .ttl(ttl)
        .try_acquire()
        .await?
        .expect("free in a");
    // Application b takes the same name at once, on all three of its databases: its
    // PostgreSQL member saw nothing of a's lease, presence or token.
    let held_b = b
        .lock("job")
        .ttl(ttl)
        .try_acquire()
        .await?
        .expect("a's lock is not b's");
    assert_eq!(held_b.held(), 3);
    assert_eq!(held_b.fencing_token(), 1, "b's token counted a's grants");
    assert_eq!(held_a.fencing_token(), 4);
    assert_eq!(b.members()[0].quorum_token("job").await?, 1);
    assert_eq!(a.members()[0].quorum_token("job").await?, 4);
    // Each release is its own application's.
    assert!(held_b.release().await?);
    assert!(!held_a.is_lost(), "{:?}", held_a.lost_reason());
    assert!(a.new_handle().lock("job").try_acquire().await?.is_none());
    assert!(held_a.release().await?);
    for app in ["a", "b"] {
        let sql = format!("DROP SCHEMA IF EXISTS quorum_schemas_{app} CASCADE");
        pg.script(&admin, &sql).await?;
    }
    Ok(())
}
