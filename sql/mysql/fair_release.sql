-- A fair holder gives back one hold without the queue, when nobody is queued for the
-- key: as lease_release (the same owner, token and expiry checks),
-- but for a last hold only while no fair waiter is queued. No row changed (a waiter
-- queued, or the lock no longer ours) sends the release through the queue's step
-- (fair/steps.rs), under the key's gate, which hands the lock on in the same
-- transaction, and tells the two apart. An inner hold is given back here whatever
-- the queue: it frees nothing.
-- The queued flag is read on the row's latest version, under its lock (a join that
-- sets it holds the row until it commits), so a waiter whose join committed before
-- this statement locked the row is never left behind a lock freed without a handoff.
-- The queue's live places are read too (a locking read, which waits for a place being
-- written), for a join that could not mark the row (a fenced transaction of the
-- holder's kept it locked: fair_ensure.sql).
-- A second at most on a row lock, as lease_release; a row still locked sends the
-- release through the queue's step.
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
UPDATE `{table}` SET
    locked = hold_count > 1,
    expires_at = IF(hold_count > 1, expires_at, UTC_TIMESTAMP(6)),
    hold_count = GREATEST(hold_count - 1, 0)
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND expires_at > UTC_TIMESTAMP(6)
  AND (hold_count > 1
       OR (NOT queued AND NOT EXISTS (
           SELECT 1 FROM `{table}_queue` AS q
           WHERE q.lock_key = :key AND q.granted_token IS NULL
             AND q.expires_at > UTC_TIMESTAMP(6))))
