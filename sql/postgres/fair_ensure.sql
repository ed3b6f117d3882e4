-- Make sure :key has a lock row to hand over, marked queued (see the migration): a
-- free one when it has none. Drawn from no sequence: the grant draws the token.
-- Sent by a join and by the first waiter's poll, in the step's transaction, under the
-- key's gate, before the step looks for a lock to hand on. From the join's commit on,
-- a fair acquisition goes through the queue rather than taking the lock at once
-- (lease_acquire), and a fair release hands the lock on rather than freeing it
-- (fair_release): both read the flag on the row's latest version, under its lock, so
-- that a release running meanwhile either freed the lock before the join looked
-- (found free, handed on) or waits for the join's commit and hands the lock on itself.
-- Never a wait on another transaction's row lock (SKIP LOCKED): a holder's fenced
-- transaction keeps the row shared-locked for as long as it writes (fence.sql), and
-- the join must not hold the key's gate that long. A row left unmarked that way (or
-- by a sweep that deletes the row under the join) is covered by the queue itself: both
-- one-statement forms also look for live places, which the join's commit makes
-- visible, and the first waiter's polls mark the row again.
-- The mark always writes the row, also when the flag is set already, so that a sweep
-- or an insert holder's release meeting it waits for, or skips, the join's row lock.
WITH marked AS (
    UPDATE "{table}" SET queued = TRUE
    WHERE lock_key IN (SELECT lock_key FROM "{table}" WHERE lock_key = :key
                       FOR NO KEY UPDATE SKIP LOCKED)
    RETURNING lock_key
)
INSERT INTO "{table}"
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token, queued)
SELECT :key, '', 'fair', FALSE, statement_timestamp(), statement_timestamp(), 0,
       statement_timestamp(), 0, 0, TRUE
WHERE NOT EXISTS (SELECT 1 FROM "{table}" WHERE lock_key = :key)
ON CONFLICT (lock_key) DO NOTHING
