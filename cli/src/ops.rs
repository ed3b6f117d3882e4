//! The operator's commands: `list`, `status`, `release --force`, `sweep`, `migrate`
//! and `schema`.
//!
//! Each prints its result on stdout, as text or (`--json`) as JSON built from values,
//! and returns the exit status, or a [`Failure`] for the caller to report.

use std::collections::HashMap;
use std::time::Duration;

use sqlock::{Dialect, LockInfo, Locker, RwLockInfo, SemaphoreInfo, SweepOptions, TableName};
use tokio::signal::unix::{signal, SignalKind};

use crate::duration::human;
use crate::failure::{Failure, EXIT_NOT_ACQUIRED};

/// `list [--json]`: the locks held now, as a table or as a JSON array of objects.
///
/// A semaphore's permits are listed with their semaphore: in JSON, as the locks they
/// are, with the semaphore's name and N besides; in text, in a section of their own,
/// after the locks, with every recorded semaphore. A name held in shared mode (by the
/// reads of a read-write lock, or by a semaphore's permits) is listed as held by no
/// owner: in JSON with `shared` (the mode) and `holders`; in text with its holders
/// counted in the owner's column (a semaphore's name in its section).
pub(crate) async fn list(locker: &Locker, json: bool) -> Result<i32, Failure> {
    let mut locks = locker.list().await?;
    let (semaphores, permits) = semaphores(locker).await?;
    let rwlocks = RwLockInfo::from_locks(locks.clone());
    if json {
        // Each row of a read-write lock: its name and the row's side.
        let mut sides = HashMap::new();
        for rw in &rwlocks {
            let rows = rw.writer.iter().map(|l| (l, "write"));
            let rows = rows.chain(rw.readers.iter().map(|l| (l, "read")));
            let rows = rows.chain(rw.waiting_writers.iter().map(|l| (l, "waiting-write")));
            for (l, side) in rows {
                sides.insert(l.key.as_str(), (rw.name.as_str(), side));
            }
        }
        let items: Vec<serde_json::Value> = locks
            .iter()
            .map(|l| {
                let mut item = to_json(l);
                // A read-write lock's row says which lock, and which side.
                if let Some(mode) = shared_mode(l) {
                    item["shared"] = mode.into();
                    item["holders"] = l.hold_count.into();
                } else if let Some((name, side)) = sides.get(l.key.as_str()) {
                    item["rwlock"] = (*name).into();
                    item["side"] = (*side).into();
                }
                if let Some((name, n)) = permits.get(&l.key) {
                    item["semaphore"] = name.as_str().into();
                    item["permits"] = (*n).into();
                }
                item
            })
            .collect();
        println!("{}", serde_json::Value::Array(items));
        return Ok(0);
    }
    // A semaphore's permits, and its name held in shared mode by them, are shown in
    // the semaphores' section.
    let in_section = |l: &LockInfo| {
        permits.contains_key(&l.key)
            || (shared_mode(l) == Some("semaphore") && semaphores.iter().any(|s| s.name == l.key))
    };
    locks.retain(|l| !in_section(l));
    if locks.is_empty() && semaphores.is_empty() {
        println!("no locks held");
    } else if !locks.is_empty() {
        print_table(&locks);
        print_rwlocks(&rwlocks);
    }
    if !semaphores.is_empty() {
        if !locks.is_empty() {
            println!();
        }
        print_semaphores(&semaphores);
    }
    Ok(0)
}

/// Whether a row is the write side of a read-write lock: the name's own row, which
/// records `write` as its strategy while the write side holds it.
fn is_write_side(l: &LockInfo) -> bool {
    l.strategy == "write" && !l.owner.is_empty()
}

/// The mode a row is held in when it is a name held in shared mode (no owner): `read`
/// or `semaphore`.
fn shared_mode(l: &LockInfo) -> Option<&str> {
    (l.owner.is_empty() && matches!(l.strategy.as_str(), "read" | "semaphore"))
        .then_some(l.strategy.as_str())
}

/// How many reads or permits hold a name held in shared mode: `1 read`, `3 permits`.
fn holds_of(l: &LockInfo) -> String {
    let what = if l.strategy == "read" {
        "read"
    } else {
        "permit"
    };
    let s = if l.hold_count == 1 { "" } else { "s" };
    format!("{} {what}{s}", l.hold_count)
}

/// Who holds a row, as the text shows it: its owner, or for a name held in shared
/// mode, no owner and how many reads or permits hold it.
fn holder(l: &LockInfo) -> String {
    match shared_mode(l) {
        Some(_) => format!("- (shared by {})", holds_of(l)),
        None if l.holder_gone => format!("{} (gone)", l.owner),
        None => l.owner.clone(),
    }
}

/// After the table: each read-write lock with its holders, the writer (the write
/// side's owner, when it holds the name) and its readers, and how many writers wait.
fn print_rwlocks(rwlocks: &[RwLockInfo]) {
    if rwlocks.is_empty() {
        return;
    }
    println!();
    println!("READ-WRITE LOCKS");
    for rw in rwlocks {
        let readers: Vec<&str> = rw.readers.iter().map(|l| l.owner.as_str()).collect();
        println!(
            "{}  writer {}  readers {}{}  waiting writers {}",
            printable(&rw.name),
            rw.writer.as_ref().map_or("-", |l| l.owner.as_str()),
            readers.len(),
            if readers.is_empty() {
                String::new()
            } else {
                format!(" ({})", readers.join(", "))
            },
            rw.waiting_writers.len(),
        );
    }
}

/// `status [--json] KEY`: who holds the lock on KEY; exit 0 held, 75 free.
pub(crate) async fn status(locker: &Locker, key: &str, json: bool) -> Result<i32, Failure> {
    let info = locker.lock_info(key).await?;
    // A holder whose presence is gone holds nothing the next acquirer waits for: the
    // key is free as far as a health check or a scheduler is concerned.
    let held = info.as_ref().is_some_and(|l| !l.holder_gone);
    match (&info, json) {
        (Some(l), true) => {
            let mut value = to_json(l);
            value["held"] = held.into();
            if let Some(mode) = shared_mode(l) {
                value["shared"] = mode.into();
                value["holders"] = l.hold_count.into();
            }
            println!("{value}");
        }
        (None, true) => println!("{}", serde_json::json!({ "key": key, "held": false })),
        (Some(l), false) => print_fields(&[
            ("key", printable(key)),
            (
                "state",
                if l.holder_gone {
                    "free: its holder's process is gone (presence), so the next \
                     acquirer takes it at once"
                        .into()
                } else if shared_mode(l).is_some() {
                    "held in shared mode".into()
                } else if is_write_side(l) {
                    "held as the write side of a read-write lock".into()
                } else {
                    "held".into()
                },
            ),
            ("strategy", l.strategy.clone()),
            ("owner", holder(l)),
            ("fencing token", l.fencing_token.to_string()),
            ("holds", l.hold_count.to_string()),
            ("held since", utc(l.acquired_at)),
            (
                "expires",
                format!("{}, in {}", utc(l.expires_at), human(l.expires_in)),
            ),
            ("fair waiters", l.waiters.to_string()),
        ]),
        (None, false) => print_fields(&[("key", printable(key)), ("state", "free".into())]),
    }
    Ok(if held { 0 } else { EXIT_NOT_ACQUIRED })
}

/// `name  value` lines, the values aligned.
pub(crate) fn print_fields(fields: &[(&str, String)]) {
    let width = fields.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    for (name, value) in fields {
        println!("{name:<width$}  {value}");
    }
}

/// A database time as the tool prints it.
pub(crate) fn utc(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S%.3f UTC").to_string()
}

fn to_json(l: &LockInfo) -> serde_json::Value {
    serde_json::json!({
        "key": l.key,
        "strategy": l.strategy,
        "owner": l.owner,
        "fencing_token": l.fencing_token,
        "hold_count": l.hold_count,
        "held_since": l.acquired_at.to_rfc3339(),
        "expires_at": l.expires_at.to_rfc3339(),
        "expires_in_ms": u64::try_from(l.expires_in.as_millis()).unwrap_or(u64::MAX),
        "waiters": l.waiters,
        "holder_gone": l.holder_gone,
    })
}

fn print_table(locks: &[LockInfo]) {
    let header = [
        "KEY",
        "STRATEGY",
        "OWNER",
        "TOKEN",
        "HELD SINCE (UTC)",
        "EXPIRES IN",
        "WAITERS",
    ];
    let rows: Vec<[String; 7]> = locks
        .iter()
        .map(|l| {
            [
                printable(&l.key),
                l.strategy.clone(),
                holder(l),
                l.fencing_token.to_string(),
                l.acquired_at.format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
                format!("{:.1}s", l.expires_in.as_secs_f64()),
                l.waiters.to_string(),
            ]
        })
        .collect();
    let mut widths = header.map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 7]| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            // Numbers are right-aligned, text left; the last column is not padded.
            let padded = match i {
                3 | 5 | 6 => format!("{cell:>w$}"),
                _ => format!("{cell:<w$}"),
            };
            out.push_str(&padded);
            out.push_str(if i == 6 { "" } else { "  " });
        }
        println!("{}", out.trim_end());
    };
    line(header);
    for row in &rows {
        line(row.each_ref().map(String::as_str));
    }
}

/// A key as it can be shown in one table cell: quoted and escaped if it holds control
/// characters, which would break the table.
pub(crate) fn printable(key: &str) -> String {
    if key.chars().any(char::is_control) {
        format!("{key:?}")
    } else {
        key.to_owned()
    }
}

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

/// The recorded semaphores, and which of the listed locks are their permits (by key:
/// the semaphore's name and N).
async fn semaphores(
    locker: &Locker,
) -> Result<(Vec<SemaphoreInfo>, HashMap<String, (String, u32)>), Failure> {
    let semaphores = locker.semaphores().await?;
    let permits = semaphores
        .iter()
        .flat_map(|s| {
            s.holders
                .iter()
                .map(|h| (h.key.clone(), (s.name.clone(), s.permits)))
        })
        .collect();
    Ok((semaphores, permits))
}

/// The semaphores' section of `list`: each with N and how many are held, then a line
/// per holder.
fn print_semaphores(semaphores: &[SemaphoreInfo]) {
    println!("SEMAPHORE  PERMITS  HELD");
    let width = semaphores
        .iter()
        .map(|s| printable(&s.name).chars().count())
        .max()
        .unwrap_or(0)
        .max("SEMAPHORE".len());
    for s in semaphores {
        println!(
            "{:<width$}  {:>7}  {:>4}",
            printable(&s.name),
            s.permits,
            s.holders.len()
        );
        for h in &s.holders {
            println!(
                "  {}  owner {}  token {}  held since {}  expires in {:.1}s",
                printable(&h.key),
                h.owner,
                h.fencing_token,
                utc(h.acquired_at),
                h.expires_in.as_secs_f64()
            );
        }
    }
}
