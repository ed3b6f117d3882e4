-- Give back one hold of :key if it is still ours: same owner, same token, unexpired.
-- The last hold frees the row (locked = FALSE, expiring now); the row stays for reuse
-- until the sweeper reclaims it.
-- Expiry is compared as a difference, which no index serves, so that the planner
-- finds the row by its key: on a table with few live leases it would otherwise pick
-- the expiry index and read every live lease.
UPDATE "{table}" SET
    locked = hold_count > 1,
    expires_at = CASE WHEN hold_count > 1 THEN expires_at ELSE statement_timestamp() END,
    hold_count = hold_count - 1
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND expires_at - statement_timestamp() > INTERVAL '0'
