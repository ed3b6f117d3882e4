//! The read-only views of the lock table: `list` (every lock, read-write lock and
//! semaphore) and `status KEY` (one key, with what its primitive adds: a read-write
//! lock's readers and waiting writers, a semaphore's permits).

use std::collections::HashMap;

use sqlock::{LockInfo, Locker, RwLockInfo, SemaphoreInfo};

use crate::duration::human;
use crate::failure::{Failure, EXIT_NOT_ACQUIRED};
use crate::show::{holder, is_write_side, print_fields, printable, shared_mode, to_json, utc};

/// `list [--json]`: the locks held now, as a table or as a JSON array of objects.
///
/// A semaphore's permits are listed with their semaphore: in JSON, as the locks they
/// are, with the semaphore's name and N besides; in text, in a section of their own,
/// after the locks, with every recorded semaphore. A name held in shared mode (by the
/// reads of a read-write lock, or by a semaphore's permits) is listed as held by no
/// owner: in JSON with `shared` (the mode) and `holders`; in text with its holders
/// counted in the owner's column (a semaphore's name in its section).
pub(crate) async fn list(locker: &Locker, json: bool) -> Result<i32, Failure> {
    if json {
        println!("{}", list_json(locker).await?);
        return Ok(0);
    }
    let mut locks = locker.list().await?;
    let (semaphores, permits) = semaphores(locker).await?;
    let rwlocks = RwLockInfo::from_locks(locks.clone());
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

/// `list --json`'s array: every lock held now, a read-write lock's rows and a
/// semaphore's permits saying which they are.
pub(crate) async fn list_json(locker: &Locker) -> Result<serde_json::Value, Failure> {
    let locks = locker.list().await?;
    let (_, permits) = semaphores(locker).await?;
    let rwlocks = RwLockInfo::from_locks(locks.clone());
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
    Ok(serde_json::Value::Array(items))
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
///
/// A name held by a read-write lock shows its readers and its waiting writers too (a
/// writer waiting behind readers is waiting, never the holder); a semaphore's name,
/// its permits (N, and how many are held).
pub(crate) async fn status(locker: &Locker, key: &str, json: bool) -> Result<i32, Failure> {
    let info = locker.lock_info(key).await?;
    // A holder whose presence is gone holds nothing the next acquirer waits for: the
    // key is free as far as a health check or a scheduler is concerned.
    let family = match &info {
        Some(l) => Family::of(locker, key, l).await?,
        None => Family::None,
    };
    let held = info.as_ref().is_some_and(|l| !l.holder_gone) && family.held();
    match (&info, json) {
        (Some(l), true) => {
            let mut value = to_json(l);
            value["held"] = held.into();
            if let Some(mode) = shared_mode(l) {
                value["shared"] = mode.into();
                value["holders"] = l.hold_count.into();
            }
            family.add_json(&mut value);
            println!("{value}");
        }
        (None, true) => println!("{}", serde_json::json!({ "key": key, "held": false })),
        (Some(l), false) => {
            let mut fields = vec![
                ("key", printable(key)),
                (
                    "state",
                    if l.holder_gone {
                        "free: its holder's process is gone (presence), so the next \
                         acquirer takes it at once"
                            .into()
                    } else if !family.held() {
                        "free: the holders of its permits or reads are gone (presence), so \
                         the next permit or writer takes over at once"
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
            ];
            family.add_fields(&mut fields);
            print_fields(&fields);
        }
        (None, false) => print_fields(&[("key", printable(key)), ("state", "free".into())]),
    }
    Ok(if held { 0 } else { EXIT_NOT_ACQUIRED })
}

/// What a name's primitive adds to its row in `status`.
enum Family {
    /// A plain lock, or a name no read-write lock or semaphore holds.
    None,
    RwLock(RwLockInfo),
    Semaphore(SemaphoreInfo),
}

impl Family {
    /// Whether what the name's row holds is held by someone alive: for a semaphore, a
    /// permit whose holder is not gone (presence); for a read-write lock, its writer or
    /// a read whose holder is not gone. Free only when every hold listed is a gone
    /// holder's: a dead holder's permit is the next permit's at once, and a dead
    /// reader's read is dropped by the next writer (a lock of another primitive on the
    /// name still waits for the name's expiry).
    fn held(&self) -> bool {
        match self {
            // With no hold listed at all (holds that lapsed, still counted by the
            // name until it expires), the name is held as its row says.
            Self::Semaphore(s) => s.holders.is_empty() || s.holders.iter().any(|h| !h.holder_gone),
            Self::RwLock(rw) => {
                rw.writer.is_some()
                    || rw.readers.is_empty()
                    || rw.readers.iter().any(|r| !r.holder_gone)
            }
            Self::None => true,
        }
    }

    /// Read only for a name that a read-write lock or a semaphore holds (its row says
    /// so): `status` of a plain lock sends one statement, as before.
    async fn of(locker: &Locker, key: &str, l: &LockInfo) -> Result<Self, Failure> {
        Ok(match l.strategy.as_str() {
            "read" | "write" => locker
                .rwlocks()
                .await?
                .into_iter()
                .find(|rw| rw.name == key)
                .map_or(Self::None, Self::RwLock),
            "semaphore" => locker
                .semaphores()
                .await?
                .into_iter()
                .find(|s| s.name == key)
                .map_or(Self::None, Self::Semaphore),
            _ => Self::None,
        })
    }

    fn add_json(&self, value: &mut serde_json::Value) {
        match self {
            Self::None => {}
            Self::RwLock(rw) => {
                let owners = |ls: &[LockInfo]| -> Vec<String> {
                    ls.iter().map(|l| l.owner.clone()).collect()
                };
                let (gone, live): (Vec<LockInfo>, Vec<LockInfo>) =
                    rw.readers.iter().cloned().partition(|r| r.holder_gone);
                value["readers"] = owners(&live).into();
                value["gone_readers"] = owners(&gone).into();
                value["waiting_writers"] = owners(&rw.waiting_writers).into();
                value["writer"] = rw.writer.as_ref().map(|w| w.owner.clone()).into();
            }
            Self::Semaphore(s) => {
                // A permit whose holder is gone is counted apart: the next acquirer
                // takes it at once.
                let (gone, live): (Vec<&LockInfo>, Vec<&LockInfo>) =
                    s.holders.iter().partition(|h| h.holder_gone);
                let owners = |ls: &[&LockInfo]| -> Vec<String> {
                    ls.iter().map(|l| l.owner.clone()).collect()
                };
                value["permits"] = s.permits.into();
                value["permits_held"] = live.len().into();
                value["permit_holders"] = owners(&live).into();
                value["permits_gone"] = gone.len().into();
                value["gone_permit_holders"] = owners(&gone).into();
            }
        }
    }

    fn add_fields(&self, fields: &mut Vec<(&'static str, String)>) {
        match self {
            Self::None => {}
            Self::RwLock(rw) => {
                let listed = |ls: &[LockInfo]| -> String {
                    let owners: Vec<&str> = ls.iter().map(|l| l.owner.as_str()).collect();
                    if owners.is_empty() {
                        "0".to_owned()
                    } else {
                        format!("{} ({})", owners.len(), owners.join(", "))
                    }
                };
                let gone: Vec<LockInfo> = rw
                    .readers
                    .iter()
                    .filter(|r| r.holder_gone)
                    .cloned()
                    .collect();
                let live: Vec<LockInfo> = rw
                    .readers
                    .iter()
                    .filter(|r| !r.holder_gone)
                    .cloned()
                    .collect();
                fields.push(("readers", listed(&live)));
                if !gone.is_empty() {
                    fields.push(("gone readers", listed(&gone)));
                }
                fields.push(("waiting writers", listed(&rw.waiting_writers)));
            }
            Self::Semaphore(s) => {
                let gone = s.holders.iter().filter(|h| h.holder_gone).count();
                let live = s.holders.len() - gone;
                fields.push((
                    "permits",
                    if gone == 0 {
                        format!("{live} of {} held", s.permits)
                    } else {
                        format!(
                            "{live} of {} held, {gone} more of holders gone (presence)",
                            s.permits
                        )
                    },
                ));
            }
        }
    }
}

pub(crate) fn print_table(locks: &[LockInfo]) {
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
