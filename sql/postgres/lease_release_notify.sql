-- lease_release, with a wake-up for waiters (LockerBuilder::notify_waiters): the same
-- owner- and token-checked release, and when it gives back the last hold, pg_notify
-- tells the listeners of the table's channel which key is free, in the same statement,
-- so a release stays one round trip. PostgreSQL delivers the notification at commit,
-- so a waiter it wakes finds the lock free. One row per matched lease: the count is
-- the release's.
-- The payload names the table (its oid: two schemas' tables of one name share the
-- channel) and then the key; a listener ignores a payload that names another table.
-- Expiry is compared as a difference, which no index serves, so that the planner
-- finds the row by its key: on a table with few live leases it would otherwise pick
-- the expiry index and read every live lease.
-- Not waiting for the commit to reach disk (synchronous_commit off for this statement's
-- own transaction, set inside the statement so that it stays one round trip; the
-- setting is in force at the statement's implicit commit and ends with it): a release
-- lost in a server crash only leaves the lease to lapse at its expiry, as if the
-- holder had crashed, and the acquisition that took the lease was durable. The cycle
-- of an acquisition and a release then waits for one flush, not two.
-- A lease with no hold left, revoked by an operator (force_release), is freed at
-- once by its holder's release: that is the holder giving it back. The count never
-- goes below 0.
WITH relaxed AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
), released AS (
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
    RETURNING lock_key, locked
)
SELECT lock_key, CASE WHEN NOT locked
    THEN pg_notify('{channel}', CAST(CAST('"{table}"' AS regclass) AS oid)::TEXT || ':' || lock_key) END
FROM released
