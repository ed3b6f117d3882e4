//! The history checker: what many processes saw of one lock (grants, confirmations
//! of still holding it, rejected writes), checked against a fenced-mutex model.
//!
//! Each process records its events with `CLOCK_MONOTONIC` timestamps, which all
//! processes of one machine share. A timestamp taken before a request was sent and one
//! taken after its answer came back bound the moment the database acted on it, so the
//! checker only ever concludes from "A's answer came back before B was sent": it never
//! needs the processes' clocks to agree more finely than that, and a process paused
//! between two of its steps cannot make it report a violation that did not happen.
//!
//! The model, per key:
//!
//! - **Tokens rise in grant order**: when grant A's answer came back before grant B
//!   was requested, A's token is lower than B's. No two grants share a token.
//! - **Mutual exclusion, fenced**: a hold is valid from its grant until it is released
//!   or lapses, in one stretch (nothing revives a lapsed lease). A grant is valid only
//!   when no valid hold of the key is open, so once B (with a higher token) was
//!   granted, no holder with a lower token may still be confirmed as holding: neither a
//!   fenced write accepted nor a release accepted, sent after B's grant came back. A
//!   holder whose lease lapsed may well go on *running* past the next grant (paused, or
//!   slow to notice); that is allowed, as long as the database accepted none of its
//!   fenced writes after the lapse.
//! - **No takeover of a valid lease** ([`check_leases`], for strategies whose locks end
//!   only by release or expiry): a lease granted by a request sent at `t` lasts on the
//!   database clock at least until `t + TTL`, unless its holder's release was sent
//!   before. A grant of a higher token whose answer came back earlier than that took a
//!   lease that was still valid, even if the fence then refused every write of the
//!   older holder. (A lower bound: renewals only make leases last longer.) For a holder
//!   killed while it held, the test reads the lease's final expiry from the table
//!   after the kill ([`Kind::Expired`]): its lease lasts until then, renewals included.
//!
//! [`lock_row`] and [`DbClock`] read a lease's row as the database has it and place
//! database times on `CLOCK_MONOTONIC`, for that.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt;

use anyhow::Context;
use sqlock::{DbPool, Dialect};

use super::Backend;

/// Nanoseconds on `CLOCK_MONOTONIC`, comparable across the processes of one machine.
pub fn now() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always there on Linux");
    u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec()).unwrap_or(0)
}

/// What happened, as one process saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// The lock was granted.
    Grant,
    /// The database accepted a fenced write of the holder: it held the lock then.
    Write,
    /// The database accepted the holder's release: it held the lock until then.
    Release,
    /// The fence refused a write: the holder had lost the lock.
    Rejected,
    /// The release found the lock no longer held.
    ReleaseRefused,
    /// A write or release whose outcome is unknown (its connection failed).
    Unknown,
    /// The final expiry of a hold whose holder was killed while it held, read from the
    /// table after the kill (so that no renewal can follow): the hold lasted until
    /// then. `sent` is a `CLOCK_MONOTONIC` moment no later than that expiry, `ack` one
    /// no earlier ([`DbClock`]).
    Expired,
}

/// One event: `sent` was taken before the request went out, `ack` after its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub kind: Kind,
    pub key: String,
    pub owner: String,
    pub token: i64,
    pub sent: u64,
    pub ack: u64,
}

impl Event {
    /// The event as one line of text, for a worker process to print.
    pub fn line(&self) -> String {
        let kind = match self.kind {
            Kind::Grant => "grant",
            Kind::Write => "write",
            Kind::Release => "release",
            Kind::Rejected => "rejected",
            Kind::ReleaseRefused => "release-refused",
            Kind::Unknown => "unknown",
            Kind::Expired => "expired",
        };
        format!(
            "EVENT {kind} {} {} {} {} {}",
            self.key, self.owner, self.token, self.sent, self.ack
        )
    }

    /// Reads back a line made by [`Event::line`]; `None` for any other line.
    pub fn parse(line: &str) -> Option<Self> {
        let mut f = line.strip_prefix("EVENT ")?.split(' ');
        let kind = match f.next()? {
            "grant" => Kind::Grant,
            "write" => Kind::Write,
            "release" => Kind::Release,
            "rejected" => Kind::Rejected,
            "release-refused" => Kind::ReleaseRefused,
            "unknown" => Kind::Unknown,
            "expired" => Kind::Expired,
            _ => return None,
        };
        Some(Self {
            kind,
            key: f.next()?.to_owned(),
            owner: f.next()?.to_owned(),
            token: f.next()?.parse().ok()?,
            sent: f.next()?.parse().ok()?,
            ack: f.next()?.parse().ok()?,
        })
    }
}

/// What the checker found.
#[derive(Debug, Default, Clone)]
pub struct Verdict {
    pub grants: usize,
    pub writes: usize,
    pub releases: usize,
    pub rejected: usize,
    pub unknown: usize,
    pub violations: Vec<String>,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} grants, {} writes confirmed, {} releases confirmed, {} stale writes \
             rejected, {} outcomes unknown, violations: {}",
            self.grants,
            self.writes,
            self.releases,
            self.rejected,
            self.unknown,
            self.violations.len()
        )
    }
}

/// Checks a history against the model (see the module's documentation), without the
/// lease rule: for locks that may end before their TTL (a for-update lock ends with
/// its connection).
pub fn check(events: &[Event]) -> Verdict {
    check_with(events, None)
}

/// Checks a history of leases of `ttl` against the whole model, the rule that no valid
/// lease is taken over included.
pub fn check_leases(events: &[Event], ttl: std::time::Duration) -> Verdict {
    check_with(events, Some(ttl))
}

/// Slack for the database clock and `CLOCK_MONOTONIC` running at slightly different
/// rates (NTP slews the first by up to 500 ppm): 2% of the TTL plus 20 ms.
fn slack(ttl: std::time::Duration) -> u64 {
    u64::try_from((ttl / 50 + std::time::Duration::from_millis(20)).as_nanos()).unwrap_or(u64::MAX)
}

fn check_with(events: &[Event], ttl: Option<std::time::Duration>) -> Verdict {
    let mut verdict = Verdict::default();
    let mut keys: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
    for e in events {
        keys.entry(&e.key).or_default().push(e);
        match e.kind {
            Kind::Grant => verdict.grants += 1,
            Kind::Write => verdict.writes += 1,
            Kind::Release => verdict.releases += 1,
            Kind::Rejected => verdict.rejected += 1,
            Kind::Unknown => verdict.unknown += 1,
            Kind::ReleaseRefused | Kind::Expired => {}
        }
    }
    for (key, events) in keys {
        check_key(key, &events, &mut verdict.violations);
        if let Some(ttl) = ttl {
            check_validity(key, &events, ttl, &mut verdict.violations);
        }
    }
    verdict
}

/// No grant of a higher token came back while a lease was certainly valid: before its
/// request's send time plus the TTL, or its final expiry when the table told it
/// ([`Kind::Expired`], a killed holder's), less the slack, and before its holder sent
/// a release (or a request whose outcome is unknown, which may have been one). Holds
/// whose end went unrecorded (the holder killed, its expiry not read) are left out.
fn check_validity(
    key: &str,
    events: &[&Event],
    ttl: std::time::Duration,
    violations: &mut Vec<String>,
) {
    let ttl_ns = u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX);
    let grants: Vec<&Event> = events
        .iter()
        .copied()
        .filter(|e| e.kind == Kind::Grant)
        .collect();
    for a in &grants {
        let ended = events
            .iter()
            .filter(|e| {
                matches!(e.kind, Kind::Release | Kind::ReleaseRefused | Kind::Unknown)
                    && e.token == a.token
                    && e.owner == a.owner
            })
            .map(|e| e.sent)
            .min();
        // A hold with no release on record is judged only if its holder went on to a
        // later grant (so it recorded how this one ended): a process killed while it
        // released, or before it could say so, leaves its last hold's end unknown.
        let went_on = grants
            .iter()
            .any(|g| g.owner == a.owner && g.token != a.token && g.sent > a.ack);
        // A killed holder's final expiry, read from the table after the kill: its lease
        // lasted until then, renewals included.
        let expired = events
            .iter()
            .filter(|e| e.kind == Kind::Expired && e.token == a.token && e.owner == a.owner)
            .map(|e| e.sent)
            .min();
        let ended = match ended {
            Some(at) => at,
            None if went_on || expired.is_some() => u64::MAX,
            None => continue,
        };
        let valid_until = a
            .sent
            .saturating_add(ttl_ns)
            .max(expired.unwrap_or(0))
            .saturating_sub(slack(ttl))
            .min(ended);
        if let Some(b) = grants
            .iter()
            .filter(|b| b.token > a.token && b.owner != a.owner && b.ack < valid_until)
            .min_by_key(|b| b.ack)
        {
            violations.push(format!(
                "{key}: token {} was granted ({b:?}) while the lease of token {} was still \
                 valid ({a:?}, TTL {ttl:?}, not released)",
                b.token, a.token
            ));
        }
    }
}

fn check_key(key: &str, events: &[&Event], violations: &mut Vec<String>) {
    let mut grants: Vec<&Event> = events
        .iter()
        .copied()
        .filter(|e| e.kind == Kind::Grant)
        .collect();

    // No two owners share a token. One owner may be granted a token again: a
    // reentrant acquisition by the handle that holds it (as when an earlier attempt of
    // the same handle timed out after the database granted it, and the grant was still
    // being given back).
    grants.sort_by_key(|g| g.token);
    for pair in grants.windows(2) {
        if pair[0].token == pair[1].token && pair[0].owner != pair[1].owner {
            violations.push(format!(
                "{key}: token {} granted twice: {:?} and {:?}",
                pair[0].token, pair[0], pair[1]
            ));
        }
    }

    // Tokens rise in grant order: sorted by when their answers came back, the highest
    // token of the grants answered before B was sent is below B's.
    let mut by_ack = grants.clone();
    by_ack.sort_by_key(|g| g.ack);
    let mut highest = Vec::with_capacity(by_ack.len());
    let mut top = i64::MIN;
    for g in &by_ack {
        top = top.max(g.token);
        highest.push((g.ack, top, *g));
    }
    for b in &grants {
        let before = highest.partition_point(|(ack, _, _)| *ack < b.sent);
        if before > 0 {
            let (_, top, a) = highest[before - 1];
            let reentrant = top == b.token && a.owner == b.owner;
            if top >= b.token && !reentrant {
                violations.push(format!(
                    "{key}: token did not rise: a grant with token {top} came back ({a:?}) \
                     before {b:?} was requested"
                ));
            }
        }
    }

    // Fenced exclusion: for each token, the earliest moment a grant with a higher
    // token was known to be in place. No confirmation of the lower token may be sent
    // after it.
    let mut superseded_at: BTreeMap<i64, (u64, &Event)> = BTreeMap::new();
    let mut earliest: Option<(u64, &Event)> = None;
    let mut by_token = grants.iter().rev().peekable();
    while let Some(&first) = by_token.next() {
        // All grants of one token (reentrant ones) are superseded only by higher ones.
        let mut same = vec![first];
        while let Some(&&g) = by_token.peek().filter(|g| g.token == first.token) {
            same.push(g);
            by_token.next();
        }
        if let Some(e) = earliest {
            superseded_at.insert(first.token, e);
        }
        for g in same {
            if earliest.is_none_or(|(ack, _)| g.ack < ack) {
                earliest = Some((g.ack, g));
            }
        }
    }
    for c in events
        .iter()
        .filter(|e| matches!(e.kind, Kind::Write | Kind::Release))
    {
        if let Some(&(at, next)) = superseded_at.get(&c.token) {
            if c.sent > at {
                violations.push(format!(
                    "{key}: token {} was still confirmed as holding ({c:?}) after token {} \
                     was granted ({next:?})",
                    c.token, next.token
                ));
            }
        }
    }
}

/// The checker's own check, run before it is trusted with a real history: clean
/// histories pass, and each kind of violation is caught.
pub fn self_check() {
    self_check_cases::run();
}

mod self_check_cases {
    use super::*;

    pub(super) fn run() {
        a_clean_history_passes();
        a_write_accepted_after_the_next_grant_is_a_violation();
        a_stale_holder_that_is_refused_is_fine();
        falling_tokens_are_a_violation();
        a_paused_recorder_is_not_a_violation();
        lines_round_trip();
        a_reentrant_grant_is_not_a_violation();
        a_takeover_of_a_valid_lease_is_a_violation();
    }

    fn a_takeover_of_a_valid_lease_is_a_violation() {
        let ttl = std::time::Duration::from_nanos(1_000_000_000);
        // Token 2 came back 0.5 s into token 1's lease of 1 s, and the fence refused
        // token 1's write: exclusion held for the data, but the lease was taken early.
        let early = [
            ev(Kind::Grant, 1, 0, 10),
            ev(Kind::Grant, 2, 5, 500_000_000),
            ev(Kind::Rejected, 1, 600_000_000, 600_000_010),
            ev(Kind::ReleaseRefused, 1, 600_000_020, 600_000_030),
        ];
        assert!(check(&early).violations.is_empty());
        assert_eq!(check_leases(&early, ttl).violations.len(), 1);
        // After the TTL, or after token 1's release was sent, it is a fair takeover.
        let late = [
            ev(Kind::Grant, 1, 0, 10),
            ev(Kind::Grant, 2, 5, 1_100_000_000),
        ];
        assert!(check_leases(&late, ttl).violations.is_empty());
        let released = [
            ev(Kind::Grant, 1, 0, 10),
            ev(Kind::Release, 1, 100, 200),
            ev(Kind::Grant, 2, 5, 300),
        ];
        assert!(check_leases(&released, ttl).violations.is_empty());
        // A holder that recorded nothing after its grant may have been killed while it
        // released: its hold's end is unknown. One that went on to a later grant has
        // recorded every release before it, so a hold it never released is judged.
        let unknown_end = [ev(Kind::Grant, 1, 0, 10), ev(Kind::Grant, 2, 5, 300)];
        assert!(check_leases(&unknown_end, ttl).violations.is_empty());
        let mut again = ev(Kind::Grant, 3, 2_000_000_000, 2_000_000_010);
        again.owner = "o1".into();
        let h = [unknown_end[0].clone(), unknown_end[1].clone(), again];
        assert_eq!(check_leases(&h, ttl).violations.len(), 1);
        // A killed holder renewed its lease until 3 s: a takeover after the grant's
        // TTL but before that expiry took a valid lease; one after it did not.
        let expired = ev(Kind::Expired, 1, 3_000_000_000, 3_000_000_100);
        let early = [
            ev(Kind::Grant, 1, 0, 10),
            expired.clone(),
            ev(Kind::Grant, 2, 5, 2_000_000_000),
        ];
        assert_eq!(check_leases(&early, ttl).violations.len(), 1);
        let late = [
            ev(Kind::Grant, 1, 0, 10),
            expired,
            ev(Kind::Grant, 2, 5, 3_000_000_200),
        ];
        assert!(check_leases(&late, ttl).violations.is_empty());
        assert!(check(&early).violations.is_empty());
    }

    fn a_reentrant_grant_is_not_a_violation() {
        let h = [
            ev(Kind::Grant, 1, 0, 10),
            ev(Kind::Grant, 1, 20, 30),
            ev(Kind::Write, 1, 40, 50),
            ev(Kind::Release, 1, 60, 70),
        ];
        let v = check(&h);
        assert!(v.violations.is_empty(), "{:?}", v.violations);
        let mut other = ev(Kind::Grant, 1, 80, 90);
        other.owner = "someone else".into();
        assert!(!check(&[h[0].clone(), other]).violations.is_empty());
    }

    fn ev(kind: Kind, token: i64, sent: u64, ack: u64) -> Event {
        Event {
            kind,
            key: "k".into(),
            owner: format!("o{token}"),
            token,
            sent,
            ack,
        }
    }

    fn a_clean_history_passes() {
        let h = [
            ev(Kind::Grant, 1, 0, 10),
            ev(Kind::Write, 1, 20, 30),
            ev(Kind::Release, 1, 40, 50),
            ev(Kind::Grant, 2, 5, 60),
            ev(Kind::Write, 2, 70, 80),
        ];
        let v = check(&h);
        assert!(v.violations.is_empty(), "{:?}", v.violations);
    }

    fn a_write_accepted_after_the_next_grant_is_a_violation() {
        let h = [
            ev(Kind::Grant, 1, 0, 10),
            ev(Kind::Grant, 2, 5, 60),
            // The paused holder of token 1 writes after token 2 was granted.
            ev(Kind::Write, 1, 70, 80),
        ];
        assert_eq!(check(&h).violations.len(), 1);
    }

    fn a_stale_holder_that_is_refused_is_fine() {
        let h = [
            ev(Kind::Grant, 1, 0, 10),
            ev(Kind::Grant, 2, 5, 60),
            ev(Kind::Rejected, 1, 70, 80),
        ];
        let v = check(&h);
        assert!(v.violations.is_empty());
        assert_eq!(v.rejected, 1);
    }

    fn falling_tokens_are_a_violation() {
        let h = [ev(Kind::Grant, 5, 0, 10), ev(Kind::Grant, 4, 20, 30)];
        assert_eq!(check(&h).violations.len(), 1);
        // The same token granted again, to another owner.
        let mut again = ev(Kind::Grant, 5, 20, 30);
        again.owner = "another owner".into();
        assert!(!check(&[ev(Kind::Grant, 5, 0, 10), again])
            .violations
            .is_empty());
    }

    fn a_paused_recorder_is_not_a_violation() {
        // Token 1's process was paused between its grant and recording the answer:
        // its ack comes after token 2's, but it was requested first.
        let h = [ev(Kind::Grant, 1, 0, 100), ev(Kind::Grant, 2, 5, 60)];
        assert!(check(&h).violations.is_empty());
    }

    fn lines_round_trip() {
        let e = ev(Kind::ReleaseRefused, 7, 1, 2);
        assert_eq!(Event::parse(&e.line()), Some(e));
        let e = ev(Kind::Expired, 7, 1, 2);
        assert_eq!(Event::parse(&e.line()), Some(e));
        assert_eq!(Event::parse("something else"), None);
    }
}

// --- The read-write lock model (tests/rwlock_processes.rs).

/// One hold of a read-write lock, as a worker saw it: its side, owner and token, when
/// its request was sent and its grant came back, and until when it surely held (the
/// sending of a release the database accepted, or else the request's sending plus the
/// TTL: a lease lasts at least that long).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RwHold {
    pub write: bool,
    pub owner: String,
    pub token: i64,
    pub sent: u64,
    pub ack: u64,
    pub end: u64,
}

/// What the read-write checker found.
#[derive(Debug, Default, Clone)]
pub struct RwVerdict {
    pub reads: usize,
    pub writes: usize,
    /// Whether two reads of different owners surely held at the same moment.
    pub readers_overlapped: bool,
    pub violations: Vec<String>,
}

/// Checks read-write holds against the model: a write never surely held at the same
/// moment as another owner's hold of either side; write tokens rise in grant order
/// (a write whose grant came back before another's request was sent has the lower
/// token). Says whether readers overlapped, which the model allows and a test of
/// sharing expects.
pub fn check_rw(holds: &[RwHold]) -> RwVerdict {
    let mut v = RwVerdict {
        reads: holds.iter().filter(|h| !h.write).count(),
        writes: holds.iter().filter(|h| h.write).count(),
        ..RwVerdict::default()
    };
    for (i, a) in holds.iter().enumerate() {
        for c in &holds[i + 1..] {
            if a.owner == c.owner {
                continue;
            }
            let overlap = a.ack < c.end && c.ack < a.end;
            if overlap && (a.write || c.write) {
                v.violations
                    .push(format!("a writer overlapped another hold: {a:?} and {c:?}"));
            }
            v.readers_overlapped |= overlap && !a.write && !c.write;
        }
        for c in holds.iter().filter(|c| c.write && a.write) {
            // A reentrant grant: the owner still held (its release's outcome unknown,
            // say) and was granted the hold it had, with its token.
            let reentrant = a.owner == c.owner && a.token == c.token;
            if a.ack < c.sent && a.token >= c.token && !reentrant {
                v.violations.push(format!(
                    "write tokens fell in grant order: {a:?} then {c:?}"
                ));
            }
        }
    }
    v
}

/// The read-write checker's own check: clean histories pass, overlapping readers are
/// noticed, and each kind of violation is caught.
pub fn self_check_rw() {
    let hold = |write, owner: &str, token, sent, ack, end| RwHold {
        write,
        owner: owner.to_owned(),
        token,
        sent,
        ack,
        end,
    };
    // Two readers at once, then a writer after both.
    let clean = [
        hold(false, "a", 1, 0, 1, 10),
        hold(false, "b", 2, 2, 3, 12),
        hold(true, "c", 3, 5, 13, 20),
    ];
    let v = check_rw(&clean);
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    assert!(v.readers_overlapped);
    // A writer surely holding while a reader surely holds.
    let bad = [hold(false, "a", 1, 0, 1, 10), hold(true, "b", 2, 2, 5, 8)];
    assert_eq!(check_rw(&bad).violations.len(), 1);
    // Two writers at once.
    let bad = [hold(true, "a", 1, 0, 1, 10), hold(true, "b", 2, 2, 5, 8)];
    assert!(!check_rw(&bad).violations.is_empty());
    // A later write with a lower token.
    let bad = [hold(true, "a", 5, 0, 1, 2), hold(true, "b", 4, 3, 4, 6)];
    assert_eq!(check_rw(&bad).violations.len(), 1);
    // Holds that could not have overlapped (an unsure stretch) are no violation.
    let fine = [hold(false, "a", 1, 0, 9, 10), hold(true, "b", 2, 0, 10, 12)];
    assert!(check_rw(&fine).violations.is_empty());
    // A reentrant grant: the owner granted again the write it still held, its token.
    let fine = [hold(true, "a", 5, 0, 1, 2), hold(true, "a", 5, 3, 4, 6)];
    assert!(check_rw(&fine).violations.is_empty());
    // The same token granted later to another owner.
    let bad = [hold(true, "a", 5, 0, 1, 2), hold(true, "b", 5, 3, 4, 6)];
    assert_eq!(check_rw(&bad).violations.len(), 1);
}

// --- A lease's row as the database has it, and the database clock on CLOCK_MONOTONIC.

/// The SQL for the database clock's now, in microseconds since the epoch, as the
/// lock statements read it.
pub fn db_now_sql(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => "(extract(epoch FROM statement_timestamp()) * 1000000)::BIGINT",
        Dialect::MySql => "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))",
        _ => "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)",
    }
}

/// The database clock's now, in microseconds since the epoch.
pub async fn db_now_us(b: &Backend, pool: &DbPool) -> anyhow::Result<i64> {
    b.scalar(pool, &format!("SELECT {}", db_now_sql(b.dialect)))
        .await
}

/// One row of the lock table, read as it is, expired or not; times are the database
/// clock's, in microseconds since the epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockRow {
    pub owner: String,
    pub token: i64,
    pub locked: bool,
    pub acquired_us: i64,
    pub expires_us: i64,
    /// The database clock when the row was read.
    pub now_us: i64,
}

/// The row of `key` in the backend's table, whatever its state; `None` when there is
/// none.
pub async fn lock_row(b: &Backend, pool: &DbPool, key: &str) -> anyhow::Result<Option<LockRow>> {
    type Raw = (String, i64, i64, i64, i64, i64);
    let t = b.quoted();
    let now = db_now_sql(b.dialect);
    let raw: Option<Raw> = match pool {
        DbPool::Postgres(p) => {
            let sql = format!(
                "SELECT lock_owner, fencing_token, CASE WHEN locked THEN 1 ELSE 0 END::BIGINT, \
                 (extract(epoch FROM acquired_at) * 1000000)::BIGINT, \
                 (extract(epoch FROM expires_at) * 1000000)::BIGINT, {now} \
                 FROM {t} WHERE lock_key = $1"
            );
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(key)
                .fetch_optional(p)
                .await?
        }
        DbPool::MySql(p) => {
            let sql = format!(
                "SELECT lock_owner, fencing_token, CAST(locked AS SIGNED), \
                 TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', acquired_at), \
                 TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', expires_at), {now} \
                 FROM {t} WHERE lock_key = ?"
            );
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(key)
                .fetch_optional(p)
                .await?
        }
        DbPool::Sqlite(p) => {
            let sql = format!(
                "SELECT lock_owner, fencing_token, CAST(locked AS INTEGER), acquired_at, \
                 expires_at, {now} FROM {t} WHERE lock_key = ?"
            );
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(key)
                .fetch_optional(p)
                .await?
        }
        _ => anyhow::bail!("unknown pool"),
    };
    Ok(raw.map(
        |(owner, token, locked, acquired_us, expires_us, now_us)| LockRow {
            owner,
            token,
            locked: locked != 0,
            acquired_us,
            expires_us,
            now_us,
        },
    ))
}

/// When the database granted a key, as a worker process says it:
/// `GRANTED_AT key owner token µs`, the time on the database clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantedAt {
    pub key: String,
    pub owner: String,
    pub token: i64,
    pub db_us: i64,
}

impl GrantedAt {
    /// The line a worker prints.
    pub fn line(key: &str, owner: &str, token: i64, db_us: i64) -> String {
        format!("GRANTED_AT {key} {owner} {token} {db_us}")
    }

    /// The grant a line says, wherever in the line it starts (the test harness may
    /// print its own words before it).
    pub fn parse(line: &str) -> Option<Self> {
        let at = line.find("GRANTED_AT ")?;
        let mut f = line[at + "GRANTED_AT ".len()..].split(' ');
        Some(Self {
            key: f.next()?.to_owned(),
            owner: f.next()?.to_owned(),
            token: f.next()?.parse().ok()?,
            db_us: f.next()?.parse().ok()?,
        })
    }
}

/// The row of a hold whose holder was killed, read after the kill: it must be there,
/// still the holder's (`owner`, `token`) and locked, since nothing else may take it
/// before it expires and the caller lets nobody else try before reading it. Its
/// `expires_us` is final: nothing renews it any more.
pub async fn dead_row(
    b: &Backend,
    pool: &DbPool,
    key: &str,
    owner: &str,
    token: i64,
) -> anyhow::Result<LockRow> {
    let row = lock_row(b, pool, key)
        .await?
        .with_context(|| format!("{}: the killed holder's row of {key} is gone", b.dialect))?;
    anyhow::ensure!(
        row.owner == owner && row.token == token && row.locked,
        "{}: the killed holder's row of {key} is no longer its own (owner {owner}, token \
         {token}): {row:?}",
        b.dialect
    );
    Ok(row)
}

/// The database clock read between two readings of `CLOCK_MONOTONIC`: places database
/// times on `CLOCK_MONOTONIC`, the two clocks taken to run at one rate (the checkers
/// allow a slack for the difference).
#[derive(Debug, Clone, Copy)]
pub struct DbClock {
    before: u64,
    db_us: i64,
    after: u64,
}

impl DbClock {
    pub async fn read(b: &Backend, pool: &DbPool) -> anyhow::Result<Self> {
        let before = now();
        let db_us = db_now_us(b, pool).await?;
        let after = now();
        Ok(Self {
            before,
            db_us,
            after,
        })
    }

    fn shift(at: u64, by_us: i64) -> u64 {
        let by_ns = by_us.unsigned_abs().saturating_mul(1000);
        if by_us >= 0 {
            at.saturating_add(by_ns)
        } else {
            at.saturating_sub(by_ns)
        }
    }

    /// A `CLOCK_MONOTONIC` moment no later than the one at which the database clock
    /// shows `db_us`.
    pub fn earliest(&self, db_us: i64) -> u64 {
        Self::shift(self.before, db_us - self.db_us)
    }

    /// A `CLOCK_MONOTONIC` moment no earlier than the one at which the database clock
    /// shows `db_us`.
    pub fn latest(&self, db_us: i64) -> u64 {
        Self::shift(self.after, db_us - self.db_us)
    }

    /// The event that tells a checker a killed holder's final expiry ([`Kind::Expired`]).
    pub fn expired(&self, key: &str, row: &LockRow) -> Event {
        Event {
            kind: Kind::Expired,
            key: key.to_owned(),
            owner: row.owner.clone(),
            token: row.token,
            sent: self.earliest(row.expires_us),
            ack: self.latest(row.expires_us),
        }
    }
}
