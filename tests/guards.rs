//! Every guard of the family answers alike: a lock's, a read's, a multi-lock's, a
//! semaphore's and a leadership's `lost_reason()` names why its lost signal fired (an
//! operator's immediate release: `NotHeld`), `is_lost()` agrees, and a read's `key()`
//! is the lock's name, not its internal row. On every backend.

mod common;

use std::time::Duration;

use sqlock::LostReason;

/// Long enough for a lost signal to fire on a loaded machine: a renewal's third of the
/// TTL and its statement.
const DEADLINE: Duration = Duration::from_secs(20);

/// A TTL whose renewals find a release soon.
const TTL: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_guard_tells_why_it_was_lost() -> anyhow::Result<()> {
    for b in common::backends("guards_lost").await {
        let holder = b.fresh_table().await?;
        let operator = b.locker().await?;
        let d = b.dialect;

        let lock = holder.lock("plain").ttl(TTL).acquire().await?;
        let read = holder.read_lock("doc").ttl(TTL).acquire().await?;
        assert_eq!(read.key(), "doc", "{d}: a read shows its lock's name");
        let multi = holder.lock_many(&["m1", "m2"]).ttl(TTL).acquire().await?;
        let permits = holder.semaphore("jobs", 3).ttl(TTL).acquire_many(2).await?;
        let election = holder.election("boss").ttl(TTL);
        let leader = election.campaign().await?;
        assert_eq!(leader.key(), election.key(), "{d}");

        // Nothing lost yet: no reason.
        assert_eq!(lock.lost_reason(), None, "{d}");
        assert_eq!(read.lost_reason(), None, "{d}");
        assert_eq!(multi.lost_reason(), None, "{d}");
        assert_eq!(permits.lost_reason(), None, "{d}");
        assert_eq!(leader.lost_reason(), None, "{d}");
        assert_eq!(leader.leader_term().lost_reason(), None, "{d}");

        // An operator frees one row of each at once: the key, the read's own row, one
        // key of the set, one permit, the election's key.
        let permit = permits.keys().next().expect("a permit").to_owned();
        for row in [
            "plain".to_owned(),
            format!("doc@read:{}", holder.owner()),
            "m2".to_owned(),
            permit,
            election.key().to_owned(),
        ] {
            assert!(
                operator.force_release_now(&row).await?,
                "{d}: {row} not held"
            );
        }
        let waits = [
            lock.lost(),
            read.lost(),
            multi.lost(),
            permits.lost(),
            leader.lost(),
        ];
        for mut lost in waits {
            let reason = tokio::time::timeout(DEADLINE, lost.wait()).await?;
            assert_eq!(reason, LostReason::NotHeld, "{d}");
        }
        assert_eq!(lock.lost_reason(), Some(LostReason::NotHeld), "{d}");
        assert!(lock.is_lost(), "{d}");
        assert_eq!(read.lost_reason(), Some(LostReason::NotHeld), "{d}");
        assert_eq!(multi.lost_reason(), Some(LostReason::NotHeld), "{d}");
        assert!(multi.is_lost(), "{d}");
        assert_eq!(permits.lost_reason(), Some(LostReason::NotHeld), "{d}");
        assert!(permits.is_lost(), "{d}");
        assert_eq!(leader.lost_reason(), Some(LostReason::NotHeld), "{d}");
        assert!(leader.is_lost(), "{d}");
        let term = leader.leader_term();
        assert!(term.is_lost(), "{d}");
        assert_eq!(term.lost_reason(), Some(LostReason::NotHeld), "{d}");

        // What was freed is no longer theirs; the rest of a set still was.
        assert!(!lock.release().await?, "{d}");
        assert!(!read.release().await?, "{d}");
        assert!(!multi.release().await?, "{d}");
        assert!(!permits.release().await?, "{d}");
        assert!(!leader.resign().await?, "{d}");
    }
    Ok(())
}
