//! How the tool shows a lock: a key in one table cell, a database time, aligned
//! fields, a row's holder and mode, and a lock as JSON; shared by `list`, `status`,
//! `release --force` and `leader`.

use sqlock::LockInfo;

/// Whether a row is the write side of a read-write lock: the name's own row, which
/// records `write` as its strategy while the write side holds it.
pub(crate) fn is_write_side(l: &LockInfo) -> bool {
    l.strategy == "write" && !l.owner.is_empty()
}

/// The mode a row is held in when it is a name held in shared mode (no owner): `read`
/// or `semaphore`.
pub(crate) fn shared_mode(l: &LockInfo) -> Option<&str> {
    (l.owner.is_empty() && matches!(l.strategy.as_str(), "read" | "semaphore"))
        .then_some(l.strategy.as_str())
}

/// How many reads or permits hold a name held in shared mode: `1 read`, `3 permits`.
pub(crate) fn holds_of(l: &LockInfo) -> String {
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
pub(crate) fn holder(l: &LockInfo) -> String {
    match shared_mode(l) {
        Some(_) => format!("- (shared by {})", holds_of(l)),
        None if l.holder_gone => format!("{} (gone)", l.owner),
        None => l.owner.clone(),
    }
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

pub(crate) fn to_json(l: &LockInfo) -> serde_json::Value {
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

/// A key as it can be shown in one table cell: quoted and escaped if it holds control
/// characters, which would break the table.
pub(crate) fn printable(key: &str) -> String {
    if key.chars().any(char::is_control) {
        format!("{key:?}")
    } else {
        key.to_owned()
    }
}
