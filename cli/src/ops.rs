//! The operator's commands that change things or the schema: `release --force`,
//! `sweep`, `migrate` and `schema` (the views, `list` and `status`, are in
//! `listing.rs`).
//!
//! Each prints its result on stdout, as text or (`--json`) as JSON built from values,
//! and returns the exit status, or a [`Failure`] for the caller to report.

use std::time::Duration;

use sqlock::{Dialect, Locker, SweepOptions, TableName};
use tokio::signal::unix::{signal, SignalKind};

use crate::duration::human;
use crate::failure::Failure;
use crate::show::{holds_of, shared_mode, utc};

/// `release --force KEY`: revokes the lock whoever holds it (`--holder-gone`: releases
/// it at once). Not held is exit 75; a for-update lock, which cannot be released by
/// force, exit 77.
pub(crate) async fn release(
    locker: &Locker,
    key: &str,
    holder_gone: bool,
    json: bool,
) -> Result<i32, Failure> {
    let refused = |e: sqlock::Error| match e {
        sqlock::Error::RowLocked { .. } => Failure::RowLocked(format!(
            "{e}; a for-update lock cannot be released by force: end its holder's \
             transaction or session"
        )),
        e => Failure::from(e),
    };
    if holder_gone {
        return release_now(locker, key, json, refused).await;
    }
    let revoked = locker.force_release(key).await.map_err(refused)?;
    if json {
        let lock = revoked.as_ref().map(|r| &r.lock);
        println!(
            "{}",
            serde_json::json!({
                "key": key,
                "mode": "revoke",
                "revoked": revoked.is_some(),
                "released": false,
                "holds_revoked": revoked.as_ref().map_or(0, |r| r.revoked),
                // A name held in shared mode has no owner: null.
                "owner": lock.map(|l| l.owner.as_str()).filter(|o| !o.is_empty()),
                "fencing_token": lock.map(|l| l.fencing_token),
                "free_by": lock.map(|l| l.expires_at.to_rfc3339()),
                "free_in_ms": lock.map(|l| u64::try_from(l.expires_in.as_millis())
                    .unwrap_or(u64::MAX)),
            })
        );
    }
    let Some(r) = revoked else {
        return Err(Failure::NotHeld(format!(
            "lock {key:?} was not held: nothing revoked"
        )));
    };
    if !json {
        let l = &r.lock;
        let by = format!("{} (in {})", utc(l.expires_at), human(l.expires_in));
        match shared_mode(l) {
            Some(_) => println!(
                "revoked lock {key:?} (held in shared mode by {}; {} revoked): each holder \
                 is told to stop and give its hold back; the name is free once they all \
                 have, or at {by} at the latest, unless new holders take it meanwhile",
                holds_of(l),
                r.revoked
            ),
            None if r.revoked == 0 => println!(
                "lock {key:?} (owner {}, fencing token {}) has no hold left to revoke \
                 (revoked before, or kept by an at-least hold): it is free once its holder \
                 gives it back, or at {by} at the latest",
                l.owner, l.fencing_token
            ),
            None => println!(
                "revoked lock {key:?} (owner {}, fencing token {}): its holder is told to \
                 stop and give it back; the key is free once it has, or at {by} at the \
                 latest",
                l.owner, l.fencing_token
            ),
        }
    }
    Ok(0)
}

/// `release --force --holder-gone KEY`: releases the lock at once, whoever holds it:
/// the key is free to others now, while a holder that is still alive runs on until
/// its next renewal.
async fn release_now(
    locker: &Locker,
    key: &str,
    json: bool,
    refused: impl Fn(sqlock::Error) -> Failure,
) -> Result<i32, Failure> {
    // Looked up first only to say whose lock it was: force_release_now does not tell.
    let held = locker.lock_info(key).await?;
    let released = locker.force_release_now(key).await.map_err(refused)?;
    if json {
        // Taken between the two statements, its holder is unknown: null.
        let (owner, token) = match (&held, released) {
            // A name held in shared mode has no owner: null, as for an unknown one.
            (Some(l), true) => (
                Some(l.owner.as_str()).filter(|o| !o.is_empty()),
                Some(l.fencing_token),
            ),
            _ => (None, None),
        };
        println!(
            "{}",
            serde_json::json!({
                "key": key,
                "mode": "holder-gone",
                "revoked": false,
                "released": released,
                "owner": owner,
                "fencing_token": token,
            })
        );
    }
    if !released {
        return Err(Failure::NotHeld(format!(
            "lock {key:?} was not held: nothing released"
        )));
    }
    if !json {
        let now = "the key is free now; a holder still running stops only at its next \
                   renewal";
        match held {
            Some(l) if shared_mode(&l).is_some() => println!(
                "released lock {key:?} at once (held in shared mode by {}, each \
                 released): {now}",
                holds_of(&l)
            ),
            Some(l) => println!(
                "released lock {key:?} at once (owner {}, fencing token {}): {now}",
                l.owner, l.fencing_token
            ),
            None => println!("released lock {key:?} at once: {now}"),
        }
    }
    Ok(0)
}

/// `sweep`: reclaims expired rows once, or every `every` until SIGINT or SIGTERM.
pub(crate) async fn sweep(
    locker: &Locker,
    grace: Duration,
    every: Option<Duration>,
    batch: u32,
    json: bool,
) -> Result<i32, Failure> {
    let options = SweepOptions::new().grace(grace).batch(batch);
    let print = |n: u64| {
        if json {
            println!("{}", serde_json::json!({ "reclaimed": n }));
        } else {
            println!("reclaimed {n} rows");
        }
    };
    // The first sweep's failure ends the command: it is most likely a setting (URL,
    // table) that no retry would fix.
    print(locker.sweep(options).await?);
    let Some(every) = every else {
        return Ok(0);
    };
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = interrupt.recv() => return Ok(0),
            _ = terminate.recv() => return Ok(0),
        }
        // A long-running sweeper outlives a database restart: a failed sweep is
        // reported and the next one tried on schedule.
        tokio::select! {
            swept = locker.sweep(options) => match swept {
                Ok(n) => print(n),
                Err(e) => eprintln!("sqlock: sweep failed, retrying in {}: {}",
                                    human(every), Failure::from(e).message()),
            },
            // A sweep is one statement per batch, each committed on its own: stopping
            // between or during them loses nothing.
            _ = interrupt.recv() => return Ok(0),
            _ = terminate.recv() => return Ok(0),
        }
    }
}

/// `sweep --schedule`: the sweep scheduled inside the database, every `every`.
pub(crate) async fn schedule_sweep(
    locker: &Locker,
    every: Duration,
    grace: Duration,
    batch: u32,
    json: bool,
) -> Result<i32, Failure> {
    let options = SweepOptions::new().grace(grace).batch(batch);
    let job = locker.schedule_sweep(every, options).await?;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "scheduled": true,
                "name": job.name,
                "schedule": job.schedule,
                "job_id": job.job_id,
            })
        );
        return Ok(0);
    }
    match job.job_id {
        Some(id) => println!(
            "scheduled pg_cron job {} (id {id}) on {:?}",
            job.name, job.schedule
        ),
        None => println!("scheduled event {} {}", job.name, job.schedule),
    }
    Ok(0)
}

/// `sweep --unschedule`: removes the sweep scheduled inside the database.
pub(crate) async fn unschedule_sweep(locker: &Locker, json: bool) -> Result<i32, Failure> {
    let removed = locker.unschedule_sweep().await?;
    if json {
        println!("{}", serde_json::json!({ "unscheduled": removed }));
    } else if removed {
        println!("removed the scheduled sweep");
    } else {
        println!("no sweep was scheduled");
    }
    Ok(0)
}

/// `migrate`: the embedded migrations for the default table, the DDL for another.
pub(crate) async fn migrate(locker: &Locker, json: bool) -> Result<i32, Failure> {
    let made = if locker.table().as_str() == sqlock::DEFAULT_TABLE {
        sqlock::migrate(locker.pool()).await
    } else {
        // The migrations name the default table; another one gets the same DDL under
        // its own name (every statement says IF NOT EXISTS, so this is repeatable).
        locker.create_table().await
    };
    let table = locker.table().as_str();
    // IF NOT EXISTS keeps a table of that name that is not sqlock's: the DDL after it
    // fails on PostgreSQL, and MariaDB and SQLite say nothing. Reading the columns
    // sqlock reads tells, so that it fails here, with a way out, rather than at the
    // first lock.
    let checked = match made {
        Ok(()) => locker.list().await.map(drop),
        Err(e) => Err(e),
    };
    match checked {
        Ok(()) => {}
        Err(e @ sqlock::Error::Database(_) | e @ sqlock::Error::Migrate(_))
            if !locker.pool().is_closed() && locker.list().await.is_err() =>
        {
            return Err(Failure::Unavailable(format!(
                "table {table} exists but is not a sqlock lock table ({}): choose \
                 another --table, or drop it",
                crate::failure::describe(&e)
            )));
        }
        Err(e) => return Err(e.into()),
    }
    if json {
        println!("{}", serde_json::json!({ "table": table, "ready": true }));
    } else {
        println!("lock table {table} is ready");
    }
    Ok(0)
}

/// `schema`: the DDL of the lock table, printed without connecting.
pub(crate) fn schema(dialect: Dialect, table: &TableName, json: bool) -> Result<i32, Failure> {
    let ddl = sqlock::schema(dialect, table);
    if json {
        println!(
            "{}",
            serde_json::json!({
                "dialect": dialect.to_string(),
                "table": table.as_str(),
                "ddl": ddl,
            })
        );
    } else {
        print!("{ddl}");
    }
    Ok(0)
}
