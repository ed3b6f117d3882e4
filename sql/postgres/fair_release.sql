-- A fair holder gives back one hold without the queue, when nobody is queued for the
-- key: as lease_release (the same owner, token and expiry checks, the same flush),
-- but for a last hold only while no fair waiter is queued. No row changed (a waiter
-- queued, or the lock no longer ours) sends the release through the queue's step
-- (fair/steps.rs), under the key's gate, which hands the lock on in the same
-- transaction, and tells the two apart. An inner hold is given back here whatever
-- the queue: it frees nothing.
-- The queued flag is read on the row's latest version, under its lock (a join that
-- sets it holds the row until it commits), so a waiter whose join committed before
-- this statement locked the row is never left behind a lock freed without a handoff.
-- The queue's live places are read too, for a join that could not mark the row (a
-- fenced transaction of the holder's kept it locked: fair_ensure.sql) or whose mark
-- a sweep deleted with the row: a place committed before this statement began stops it.
-- Not waiting for the commit to reach disk, as lease_release: it hands nothing on,
-- and a release lost in a server crash leaves the lease to lapse at its expiry.
WITH relaxed AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
)
UPDATE "{table}" SET
    locked = hold_count > 1,
    expires_at = CASE WHEN hold_count > 1 THEN expires_at ELSE statement_timestamp() END,
    hold_count = greatest(hold_count - 1, 0)
FROM relaxed
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND expires_at - statement_timestamp() > INTERVAL '0'
  AND (hold_count > 1
       OR (NOT queued AND NOT EXISTS (
           SELECT 1 FROM "{table}_queue" AS q
           WHERE q.lock_key = :key AND q.granted_token IS NULL
             AND q.expires_at > statement_timestamp())))
