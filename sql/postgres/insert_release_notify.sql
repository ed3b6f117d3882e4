-- insert_release, with a wake-up for waiters (LockerBuilder::notify_waiters): delete
-- the row of the last hold when the lease is still ours, and tell the listeners of the
-- table's channel that the key is free, in the same statement (delivered at commit).
-- Expiry is compared as a difference, which no index serves, so that the planner
-- finds the row by its key: on a table with few live leases it would otherwise pick
-- the expiry index and read every live lease.
WITH released AS (
    DELETE FROM "{table}"
    WHERE lock_key = :key
      AND lock_owner = :owner
      AND fencing_token = :token
      AND locked
      AND hold_count = 1
      AND expires_at - statement_timestamp() > INTERVAL '0'
    RETURNING lock_key
)
SELECT lock_key, pg_notify('{channel}', lock_key) FROM released
