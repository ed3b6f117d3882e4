//! `status` and `list` over several databases (`--database-url` three times or
//! more): each database's view of the quorum locks held there, and whether a
//! majority holds the key, as a quorum lock is held.

use std::collections::BTreeMap;

use sqlock::{LockInfo, Locker};

use crate::connect::{self, open, redact, Opening, CLOSE_TIMEOUT};
use crate::duration::human;
use crate::failure::{Failure, EXIT_NOT_ACQUIRED, EXIT_UNAVAILABLE};
use crate::listing::{list_json, print_table};
use crate::show::{holder, print_fields, printable, to_json};

/// One database of the quorum, as far as a read-only view goes.
pub(crate) struct View {
    /// The URL, its password left out.
    shown: String,
    /// The handle and its pool, or why the database could not be used.
    opened: Result<(sqlock::DbPool, Locker), String>,
}

/// Opens every database read-only: one that cannot be reached is shown as such
/// rather than failing the whole view. Bad usage (an unsupported URL) still fails.
pub(crate) async fn open_all(
    urls: &[String],
    table: &sqlock::TableName,
    pooling: bool,
) -> Result<Vec<View>, Failure> {
    let how = Opening {
        pooling,
        creates: false,
        holds: false,
        presence: false,
        migrates: false,
    };
    let mut views = Vec::with_capacity(urls.len());
    for url in urls {
        let database = connect::database(Some(url))?;
        let opened = match open(&database, table, how).await {
            Ok(opened) => Ok(opened),
            Err(Failure::Unavailable(why)) => Err(why),
            Err(other) => return Err(other),
        };
        views.push(View {
            shown: redact(&database.url),
            opened,
        });
    }
    Ok(views)
}

/// Closes every pool, never waiting long.
pub(crate) async fn close_all(views: Vec<View>) {
    for view in views {
        if let Ok((pool, locker)) = view.opened {
            drop(locker);
            let _ = tokio::time::timeout(CLOSE_TIMEOUT, pool.close()).await;
        }
    }
}

/// Whether a row is a lease of the lease strategy, as a quorum lock holds on each
/// database: not another strategy's lock, nor a read-write lock's or a semaphore's.
fn is_lease(l: &LockInfo) -> bool {
    l.strategy == "lease"
}

/// A failure's message (which may carry a hint on a line of its own) on one line.
fn one_line(why: &str) -> String {
    why.lines().collect::<Vec<_>>().join("; ")
}

/// How many databases a quorum of `n` needs.
fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// What one database says of a key.
enum Seen {
    /// A lease whose holder is alive (as far as presence tells): what a quorum lock
    /// holds on each of its databases.
    Held(LockInfo),
    /// Held otherwise (another strategy, or a primitive's row): busy for a quorum lock
    /// there, and no part of one.
    Other(LockInfo),
    /// Free there (or its holder's process is gone, which frees it).
    Free(Option<LockInfo>),
    /// It did not answer.
    Unreachable(String),
}

/// `status KEY` over several databases: each database's view of the key, then
/// whether a majority holds it. Exit 0 when a majority holds it, 75 when it is not
/// held on a majority though a majority answered, 69 when too few answered to tell.
pub(crate) async fn status(views: &[View], key: &str, json: bool) -> Result<i32, Failure> {
    let mut seen = Vec::with_capacity(views.len());
    // Each database's quorum token of the key: none where its token table is missing
    // (no quorum lock ever ran there) or it did not answer.
    let mut tokens = Vec::with_capacity(views.len());
    for view in views {
        let (s, token) = match &view.opened {
            Err(why) => (Seen::Unreachable(why.clone()), None),
            Ok((_, locker)) => match locker.lock_info(key).await {
                Ok(l) => {
                    let token = locker.quorum_token(key).await.ok();
                    match l {
                        Some(l) if !l.holder_gone && is_lease(&l) => (Seen::Held(l), token),
                        Some(l) if !l.holder_gone => (Seen::Other(l), token),
                        l => (Seen::Free(l), token),
                    }
                }
                Err(e) => (
                    Seen::Unreachable(Failure::from(e).message().to_owned()),
                    None,
                ),
            },
        };
        seen.push(s);
        tokens.push(token);
    }
    let highest = tokens.iter().flatten().max().copied();
    let needed = majority(views.len());
    let holding = seen.iter().filter(|s| matches!(s, Seen::Held(_))).count();
    let answered = seen
        .iter()
        .filter(|s| !matches!(s, Seen::Unreachable(_)))
        .count();
    let held = holding >= needed;
    // Not held on a majority: certainly not held by a quorum unless the databases that
    // did not answer could make one up.
    let code = if held {
        0
    } else if holding + (views.len() - answered) >= needed {
        EXIT_UNAVAILABLE
    } else {
        EXIT_NOT_ACQUIRED
    };
    if json {
        let databases: Vec<serde_json::Value> = views
            .iter()
            .zip(&seen)
            .zip(&tokens)
            .map(|((view, s), token)| {
                let mut value = match s {
                    Seen::Held(l) => {
                        let mut v = to_json(l);
                        v["held"] = true.into();
                        v
                    }
                    Seen::Other(l) => {
                        let mut v = to_json(l);
                        v["held"] = true.into();
                        v
                    }
                    Seen::Free(Some(l)) => {
                        let mut v = to_json(l);
                        v["held"] = false.into();
                        v
                    }
                    Seen::Free(None) => serde_json::json!({ "held": false }),
                    Seen::Unreachable(why) => serde_json::json!({ "error": why }),
                };
                value["database"] = view.shown.clone().into();
                value["quorum_token"] = (*token).into();
                value["reachable"] = (!matches!(s, Seen::Unreachable(_))).into();
                value["quorum_lease"] = matches!(s, Seen::Held(_)).into();
                value
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "key": key,
                "held": held,
                "held_on": holding,
                "answered": answered,
                "majority": needed,
                "quorum_token": highest,
                "databases": databases,
            })
        );
        return Ok(code);
    }
    let state = if held {
        format!(
            "held: live leases on {holding} of {} databases, a majority (each database \
             names the owner its lease has there)",
            views.len()
        )
    } else if code == EXIT_NOT_ACQUIRED {
        format!(
            "not held by a quorum: live leases on {holding} of {} databases, fewer than \
             the {needed} a quorum lock needs",
            views.len()
        )
    } else {
        format!(
            "unknown: live leases on {holding} of {} databases, and only {answered} \
             answered (a quorum lock needs {needed})",
            views.len()
        )
    };
    let mut fields = vec![
        ("key".to_owned(), printable(key)),
        ("state".to_owned(), state),
    ];
    fields.push((
        "quorum token".to_owned(),
        match highest {
            Some(t) => format!("{t} (the highest any database answering recorded)"),
            None => "none recorded".to_owned(),
        },
    ));
    for (i, ((view, s), token)) in views.iter().zip(&seen).zip(&tokens).enumerate() {
        let said = match s {
            Seen::Held(l) => format!(
                "held by {}, lease token {}, expires in {}",
                holder(l),
                l.fencing_token,
                human(l.expires_in)
            ),
            Seen::Other(l) => format!(
                "held ({}) by {}, no quorum's lease (it keeps this database busy for \
                 one)",
                l.strategy,
                holder(l)
            ),
            Seen::Free(Some(_)) => "free: its holder's process is gone (presence)".to_owned(),
            Seen::Free(None) => "free".to_owned(),
            Seen::Unreachable(why) => format!("unavailable: {}", one_line(why)),
        };
        let said = match token {
            Some(t) => format!("{said}; quorum token {t}"),
            None => said,
        };
        fields.push((
            format!("database {}", i + 1),
            format!("{}: {said}", view.shown),
        ));
    }
    let fields: Vec<(&str, String)> = fields
        .iter()
        .map(|(n, v)| (n.as_str(), v.clone()))
        .collect();
    print_fields(&fields);
    Ok(code)
}

/// `list` over several databases: each database's locks in a section of its own (the
/// table `list` shows of one database), then the keys a majority holds a lease of. Exit 0, or 69 when
/// fewer than a majority answered.
pub(crate) async fn list_all(views: &[View], json: bool) -> Result<i32, Failure> {
    let needed = majority(views.len());
    let mut answered = 0;
    // Per key, how many databases hold it.
    let mut held_on: BTreeMap<String, usize> = BTreeMap::new();
    let mut sections = Vec::with_capacity(views.len());
    for view in views {
        let listed = match &view.opened {
            Err(why) => Err(why.clone()),
            Ok((_, locker)) => match locker.list().await {
                Ok(locks) => Ok((locker, locks)),
                Err(e) => Err(Failure::from(e).message().to_owned()),
            },
        };
        if let Ok((_, locks)) = &listed {
            answered += 1;
            for l in locks.iter().filter(|l| !l.holder_gone && is_lease(l)) {
                *held_on.entry(l.key.clone()).or_default() += 1;
            }
        }
        sections.push(listed);
    }
    let quorum: Vec<(&String, &usize)> = held_on.iter().filter(|(_, n)| **n >= needed).collect();
    let code = if answered >= needed {
        0
    } else {
        EXIT_UNAVAILABLE
    };
    if json {
        let mut databases = Vec::with_capacity(views.len());
        for (view, listed) in views.iter().zip(&sections) {
            // What `list --json` gives for one database, read again for its
            // read-write and semaphore annotations: a failure now shows as one.
            let locks = match listed {
                Ok((locker, _)) => list_json(locker).await.map_err(|f| f.message().to_owned()),
                Err(why) => Err(why.clone()),
            };
            databases.push(match locks {
                Ok(locks) => serde_json::json!({
                    "database": view.shown,
                    "reachable": true,
                    "locks": locks,
                }),
                Err(why) => serde_json::json!({
                    "database": view.shown,
                    "reachable": false,
                    "error": why,
                }),
            });
        }
        let quorum: Vec<serde_json::Value> = quorum
            .iter()
            .map(|(key, n)| serde_json::json!({ "key": key, "held_on": n }))
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "answered": answered,
                "majority": needed,
                "databases": databases,
                "held_by_a_majority": quorum,
            })
        );
        return Ok(code);
    }
    for (i, (view, listed)) in views.iter().zip(&sections).enumerate() {
        if i > 0 {
            println!();
        }
        println!("DATABASE {} OF {}  {}", i + 1, views.len(), view.shown);
        match listed {
            Ok((_, locks)) if locks.is_empty() => println!("no locks held"),
            Ok((_, locks)) => print_table(locks),
            Err(why) => println!("unavailable: {}", one_line(why)),
        }
    }
    println!();
    println!("LEASES HELD ON A MAJORITY ({needed} OF {})", views.len());
    if quorum.is_empty() {
        println!("none");
    }
    for (key, n) in quorum {
        println!("{}  on {n} of {}", printable(key), views.len());
    }
    if answered < needed {
        println!("(only {answered} databases answered: a key may be held on others)");
    }
    Ok(code)
}
