//! The raw baseline: an acquisition and a release with the library's own statements,
//! sent through sqlx on the same pool, a handoff made of them, and the plans of those
//! statements.

use std::time::{Duration, Instant};

use sqlock::{DbPool, Dialect, Strategy};
use sqlx::{Database, Encode, Type};

use super::statements::{RawStatements, Stmt, Values};
use crate::db::on_pool;
use crate::stats::Samples;

/// What a raw cycle reports: the acquisition's latency, or `None` when the lock was
/// busy (never, on distinct keys).
type Cycle = Result<Option<std::time::Duration>, sqlx::Error>;

/// One acquisition and release of `v.key` with the raw statements of a strategy.
pub(crate) async fn cycle(db: &DbPool, s: &RawStatements, v: &mut Values) -> Cycle {
    match v.strategy {
        Strategy::ForUpdate => on_pool!(db, |pool| for_update_cycle(pool, s, v).await),
        _ => on_pool!(db, |pool| lease_cycle(pool, s, v).await),
    }
}

async fn lease_cycle<DB>(pool: &sqlx::Pool<DB>, s: &RawStatements, v: &mut Values) -> Cycle
where
    DB: Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'a> &'a str: Encode<'a, DB> + Type<DB>,
    for<'a> i64: Encode<'a, DB> + sqlx::Decode<'a, DB> + Type<DB>,
    for<'a> String: sqlx::Decode<'a, DB> + Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    use sqlx::Row;
    let started = Instant::now();
    let row = s.acquire.bind::<DB>(v).fetch_optional(pool).await?;
    let latency = started.elapsed();
    let Some(row) = row else {
        return Ok(None);
    };
    let owner: String = row.try_get(0)?;
    if owner != v.owner {
        return Ok(None);
    }
    v.token = row.try_get(1)?;
    let release = match v.strategy {
        Strategy::Insert => &s.insert_release,
        _ => &s.lease_release,
    };
    release.bind::<DB>(v).execute(pool).await?;
    Ok(Some(latency))
}

async fn for_update_cycle<DB>(pool: &sqlx::Pool<DB>, s: &RawStatements, v: &mut Values) -> Cycle
where
    DB: Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'a> &'a str: Encode<'a, DB> + Type<DB>,
    for<'a> i64: Encode<'a, DB> + Type<DB>,
{
    let Some(fu) = &s.for_update else {
        return Err(sqlx::Error::Protocol("no for-update statements".into()));
    };
    let started = Instant::now();
    for _ in 0..2 {
        let mut tx = pool.begin().await?;
        if let Some(begin) = &fu.begin {
            begin.bind::<DB>(v).execute(&mut *tx).await?;
        }
        if fu
            .lock_nowait
            .bind::<DB>(v)
            .fetch_optional(&mut *tx)
            .await?
            .is_none()
        {
            // No row yet: made once per key, outside the transaction, as the library does.
            tx.rollback().await?;
            fu.ensure.bind::<DB>(v).execute(pool).await?;
            continue;
        }
        fu.grant.bind::<DB>(v).execute(&mut *tx).await?;
        let latency = started.elapsed();
        tx.commit().await?;
        return Ok(Some(latency));
    }
    Ok(None)
}

/// A handoff with the library's own statements and nothing else: the holder's release
/// on one connection, then the next owner's acquisition on another, back to back, each
/// time after the holder has held the key for `hold` (the servers and the connections
/// idle meanwhile, as a contended run's are). The time from the release's start to the
/// grant's answer, until `until`: the floor under the library's handoff, which adds
/// only the wake-up and its own path between the two statements.
///
/// `v`'s owner, first, and `next_owner` take turns at holding `v.key`.
pub(crate) async fn handoff(
    db: &DbPool,
    s: &RawStatements,
    v: &Values,
    next_owner: &str,
    hold: Duration,
    until: Instant,
) -> Result<Samples, sqlx::Error> {
    on_pool!(db, |pool| handoff_on(pool, s, v, next_owner, hold, until)
        .await)
}

async fn handoff_on<DB>(
    pool: &sqlx::Pool<DB>,
    s: &RawStatements,
    v: &Values,
    next_owner: &str,
    hold: Duration,
    until: Instant,
) -> Result<Samples, sqlx::Error>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'a> &'a str: Encode<'a, DB> + Type<DB>,
    for<'a> i64: Encode<'a, DB> + sqlx::Decode<'a, DB> + Type<DB>,
    for<'a> String: sqlx::Decode<'a, DB> + Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    let mut conns = [pool.acquire().await?, pool.acquire().await?];
    let mut values = [
        v.clone(),
        Values {
            owner: next_owner.to_owned(),
            ..v.clone()
        },
    ];
    let mut samples = Samples::default();
    let mut holder = 0;
    if !take(&mut conns[0], s, &mut values[0]).await? {
        return Err(sqlx::Error::Protocol(format!("{} was busy", v.key)));
    }
    while Instant::now() < until {
        tokio::time::sleep(hold).await;
        let next = 1 - holder;
        let started = Instant::now();
        s.lease_release
            .bind::<DB>(&values[holder])
            .execute(&mut *conns[holder])
            .await?;
        let granted = take(&mut conns[next], s, &mut values[next]).await?;
        let took = started.elapsed();
        if !granted {
            return Err(sqlx::Error::Protocol(format!(
                "{} was not granted after its release",
                v.key
            )));
        }
        samples.push(took);
        holder = next;
    }
    s.lease_release
        .bind::<DB>(&values[holder])
        .execute(&mut *conns[holder])
        .await?;
    Ok(samples)
}

/// The raw acquisition of `v.key` for `v.owner` on `conn`: whether granted, its token
/// kept in `v`.
async fn take<DB>(
    conn: &mut sqlx::pool::PoolConnection<DB>,
    s: &RawStatements,
    v: &mut Values,
) -> Result<bool, sqlx::Error>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'a> &'a str: Encode<'a, DB> + Type<DB>,
    for<'a> i64: Encode<'a, DB> + sqlx::Decode<'a, DB> + Type<DB>,
    for<'a> String: sqlx::Decode<'a, DB> + Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    use sqlx::Row;
    let Some(row) = s.acquire.bind::<DB>(v).fetch_optional(&mut **conn).await? else {
        return Ok(false);
    };
    let owner: String = row.try_get(0)?;
    if owner != v.owner {
        return Ok(false);
    }
    v.token = row.try_get(1)?;
    Ok(true)
}

/// The server's plan for `st` with `v` bound, one line of text per row: `EXPLAIN` on
/// PostgreSQL, `EXPLAIN FORMAT=JSON` on MariaDB, `EXPLAIN QUERY PLAN` on SQLite.
pub(crate) async fn explain(
    db: &DbPool,
    st: &Stmt,
    v: &Values,
) -> Result<Vec<String>, sqlx::Error> {
    use sqlx::Row;
    let (prefix, col) = match db.dialect() {
        Dialect::Postgres => ("EXPLAIN ", 0),
        Dialect::MySql => ("EXPLAIN FORMAT=JSON ", 0),
        _ => ("EXPLAIN QUERY PLAN ", 3),
    };
    let explained = st.explained(prefix);
    let lines: Vec<String> = on_pool!(db, |pool| {
        let rows = explained.bind(v).fetch_all(pool).await?;
        rows.iter()
            .map(|r| r.try_get::<String, _>(col))
            .collect::<Result<Vec<String>, sqlx::Error>>()
    })?;
    Ok(lines
        .iter()
        .flat_map(|l| l.lines().map(str::to_owned))
        .collect())
}
