-- An operator's release of :key, whoever holds it. The token moves on, so the old
-- holder's renewals, releases and fenced writes all fail from now on.
-- The key's fence bucket is locked first (it is "updated" to itself), as acquisitions
-- lock it, so that no acquisition waiting with a token already drawn sees this one
-- overtake it. The key's row by primary key only, never a scan that would wait behind
-- other keys' row locks (see lease_renew). Assigned left to right: the token first,
-- while the row reads as held. No wait on a row lock: a for-update holder keeps the
-- key's row locked for its whole transaction, and an operator's call must not wait for
-- it; a locked row fails the statement at once (tried again, then reported).
-- A name held in shared mode (no owner: reads of a read-write lock, permits of a
-- semaphore) is not released here: its holds are released with it in one transaction
-- (shared_force.sql), and a name a new read or permit took since is theirs.
SET STATEMENT innodb_lock_wait_timeout = 0 FOR
UPDATE `{table}_fence` AS f
    STRAIGHT_JOIN `{table}` AS l FORCE INDEX (PRIMARY) ON l.lock_key = :key
SET f.bucket = f.bucket,
    l.fencing_token = GREATEST(NEXTVAL(`{table}_fence_seq`), l.fencing_token + 1),
    l.hold_count = 0,
    l.expires_at = UTC_TIMESTAMP(6),
    l.locked = FALSE
WHERE f.bucket = CRC32(:key) % 1024
  AND l.locked
  AND l.lock_owner <> ''
  AND l.expires_at > UTC_TIMESTAMP(6)
