//! The semaphore's history checker: what many processes saw of one semaphore's
//! permits (grants, releases), checked against the model of N permits, with the
//! events and timestamps of `history.rs` (`CLOCK_MONOTONIC`, `sent` before a request,
//! `ack` after its answer). Each event's key is the slot's (`semaphore:<name>#<i>`).
//!
//! The model:
//!
//! - **Tokens rise per slot**: when grant A of a slot came back before grant B of the
//!   same slot was requested, A's token is lower. No two grants of a slot share one.
//! - **At most N held**: a permit is certainly held from its grant's answer until its
//!   accepted release was sent (the database processed the release later, and nothing
//!   revives a lapsed lease), or, without one, until its request's send time plus the
//!   TTL, or the final expiry the table showed after its holder was killed
//!   ([`Kind::Expired`]), whichever is later (less a slack for clock rates), or its
//!   holder's first refused or unknown release, whichever is first. At no instant are
//!   more than N permits certainly held, nor two of one slot.
//!
//! Only overlaps that certainly happened are reported: a paused holder's permit counts
//! as held for its TTL only, a killed one's until the expiry read after the kill.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use super::history::{Event, Kind, Verdict};

/// Slack for the database clock and `CLOCK_MONOTONIC` running at different rates, as
/// `history.rs` allows.
fn slack(ttl: Duration) -> u64 {
    u64::try_from((ttl / 50 + Duration::from_millis(20)).as_nanos()).unwrap_or(u64::MAX)
}

/// Checks the events of one semaphore of `n` permits whose leases last `ttl`.
pub fn check(events: &[Event], n: usize, ttl: Duration) -> Verdict {
    let mut verdict = Verdict::default();
    for e in events {
        match e.kind {
            Kind::Grant => verdict.grants += 1,
            Kind::Release => verdict.releases += 1,
            Kind::Unknown => verdict.unknown += 1,
            _ => {}
        }
    }
    let ttl_ns = u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX);
    // Each grant's certain stretch: (start, end, slot, owner, token).
    let mut stretches = Vec::new();
    for g in events.iter().filter(|e| e.kind == Kind::Grant) {
        let of_grant = |k: &Kind| {
            events
                .iter()
                .filter(|e| {
                    e.kind == *k && e.key == g.key && e.owner == g.owner && e.token == g.token
                })
                .map(|e| e.sent)
                .min()
        };
        let end = match of_grant(&Kind::Release) {
            Some(released) => released,
            None => {
                let lapse = g
                    .sent
                    .saturating_add(ttl_ns)
                    .max(of_grant(&Kind::Expired).unwrap_or(0))
                    .saturating_sub(slack(ttl));
                [of_grant(&Kind::ReleaseRefused), of_grant(&Kind::Unknown)]
                    .into_iter()
                    .flatten()
                    .fold(lapse, u64::min)
            }
        };
        if end > g.ack {
            stretches.push((g.ack, end, g.key.as_str(), g.owner.as_str(), g.token));
        }
    }
    // At most N at once, and one per slot: a sweep over the stretches' ends.
    let mut points: Vec<(u64, bool, usize)> = Vec::new();
    for (i, s) in stretches.iter().enumerate() {
        points.push((s.0, true, i));
        points.push((s.1, false, i));
    }
    // Ends before starts at the same instant: touching stretches do not overlap.
    points.sort_by_key(|&(t, start, _)| (t, start));
    let mut open: Vec<usize> = Vec::new();
    for (t, start, i) in points {
        if !start {
            open.retain(|&j| j != i);
            continue;
        }
        let s = stretches[i];
        if let Some(&j) = open.iter().find(|&&j| stretches[j].2 == s.2) {
            verdict.violations.push(format!(
                "slot {} held twice at {t}: token {} ({}) and token {} ({})",
                s.2, stretches[j].4, stretches[j].3, s.4, s.3
            ));
        }
        open.push(i);
        if open.len() > n {
            verdict.violations.push(format!(
                "{} permits of {n} held at {t}: {:?}",
                open.len(),
                open.iter()
                    .map(|&j| (stretches[j].2, stretches[j].4))
                    .collect::<Vec<_>>()
            ));
        }
    }
    // Tokens rise per slot.
    let mut slots: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
    for g in events.iter().filter(|e| e.kind == Kind::Grant) {
        slots.entry(&g.key).or_default().push(g);
    }
    for (slot, grants) in slots {
        for a in &grants {
            for b in &grants {
                if std::ptr::eq(*a, *b) {
                    continue;
                }
                if a.token == b.token {
                    verdict
                        .violations
                        .push(format!("slot {slot}: token {} granted twice", a.token));
                } else if a.ack < b.sent && a.token > b.token {
                    verdict.violations.push(format!(
                        "slot {slot}: token {} granted after token {}",
                        b.token, a.token
                    ));
                }
            }
        }
    }
    verdict.violations.dedup();
    verdict
}
