-- The insert strategy's release of its last hold: delete the row, so that a free lock
-- is no row at all. Matches only when the lease is still ours (owner, token, unexpired)
-- with one hold left; otherwise lease_release gives back one of several holds.
-- Expiry is compared as a difference, which no index serves, so that the planner
-- finds the row by its key: on a table with few live leases it would otherwise pick
-- the expiry index and read every live lease.
DELETE FROM "{table}"
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND hold_count = 1
  AND expires_at - statement_timestamp() > INTERVAL '0'
