-- lease_force_release, with a wake-up for waiters (LockerBuilder::notify_waiters): an
-- operator's release of :key, whoever holds it, that also tells the listeners of the
-- table's channel the key is free, in the same statement (delivered at commit).
-- Expiry is compared as a difference, which no index serves, so that the planner
-- finds the row by its key: on a table with few live leases it would otherwise pick
-- the expiry index and read every live lease.
WITH serialized AS (
    SELECT pg_advisory_xact_lock(hashtext('{table}'), hashtext(:key)) AS done
), released AS (
    UPDATE "{table}" SET
        locked = FALSE,
        hold_count = 0,
        expires_at = statement_timestamp(),
        fencing_token = greatest(nextval('"{table}_fence_seq"'), fencing_token + 1)
    FROM serialized
    WHERE lock_key = :key
      AND locked
      AND expires_at - statement_timestamp() > INTERVAL '0'
    RETURNING lock_key
)
SELECT lock_key, pg_notify('{channel}', lock_key) FROM released
