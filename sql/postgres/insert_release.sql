-- The insert strategy's release of its last hold: delete the row, so that a free lock
-- is no row at all. Matches only when the lease is still ours (owner, token, unexpired)
-- with one hold left; otherwise lease_release gives back one of several holds.
-- Expiry is compared as a difference, which no index serves, so that the planner
-- finds the row by its key: on a table with few live leases it would otherwise pick
-- the expiry index and read every live lease.
-- Not waiting for the commit to reach disk (synchronous_commit off for this statement's
-- own transaction, set inside the statement so that it stays one round trip; the
-- setting is in force at the statement's implicit commit and ends with it): a release
-- lost in a server crash only leaves the lease to lapse at its expiry, as if the
-- holder had crashed, and the acquisition that took the lease was durable. The cycle
-- of an acquisition and a release then waits for one flush, not two.
-- A row with no hold left, revoked by an operator (force_release), is deleted by its
-- holder's release too: that is the holder giving it back.
-- A row fair waiters are queued for (queued, see the migration) is not deleted: it
-- carries the flag, and is freed instead (lease_release, which the caller sends when
-- this changes nothing), for the queue to hand it on.
WITH relaxed AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
)
DELETE FROM "{table}"
USING relaxed
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND NOT queued
  AND hold_count <= 1
  AND expires_at - statement_timestamp() > INTERVAL '0'
