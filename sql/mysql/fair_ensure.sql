-- Make sure :key has a lock row to hand over, marked queued (see the migration): a
-- free one when it has none.
-- Sent by a join and by the first waiter's poll, in the step's transaction, under the
-- key's gate, before the step looks for a lock to hand on. From the join's commit on,
-- a fair acquisition goes through the queue rather than taking the lock at once
-- (lease_acquire), and a fair release hands the lock on rather than freeing it
-- (fair_release): both read the flag on the row under its lock, so that a release
-- running meanwhile either freed the lock before the join looked (found free, handed
-- on) or waits for the join's commit and hands the lock on itself.
-- No wait on a row lock: a for-update holder keeps the key's row locked for its whole
-- transaction, and a holder's fenced transaction keeps it shared-locked for as long
-- as it writes (fence.sql); the join must not hold the key's gate that long. A locked
-- row fails this statement alone at once (ER_LOCK_WAIT_TIMEOUT), and the step goes on
-- with the row unmarked: the queue itself covers it, as both one-statement forms also
-- look for live places, which the join's commit makes visible, and the first waiter's
-- polls mark the row again.
SET STATEMENT innodb_lock_wait_timeout = 0 FOR
INSERT INTO `{table}`
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token, queued)
VALUES
    (:key, '', 'fair', FALSE, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), 0,
     UTC_TIMESTAMP(6), 0, 0, TRUE)
ON DUPLICATE KEY UPDATE queued = TRUE
