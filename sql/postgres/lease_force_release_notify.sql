-- lease_force_release, with a wake-up for waiters (LockerBuilder::notify_waiters): an
-- operator's release of :key, whoever holds it, that also tells the listeners of the
-- table's channel the key is free, in the same statement (delivered at commit). The
-- gate and the rows that come back are lease_force_release's.
-- The payload names the table (its oid: two schemas' tables of one name share the
-- channel) and then the key; a listener ignores a payload that names another table.
-- Expiry is compared as a difference, which no index serves, so that the planner
-- finds the row by its key: on a table with few live leases it would otherwise pick
-- the expiry index and read every live lease.
-- A name held in shared mode (no owner: reads of a read-write lock, permits of a
-- semaphore) is not released here: its holds are released with it in one transaction
-- (shared_force.sql), and a name a new read or permit took since is theirs.
WITH gate AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock(hashtextextended(:key, hashtext('{table}'))) AS open
), target AS MATERIALIZED (
    SELECT l.lock_key FROM "{table}" AS l, gate
    WHERE gate.open AND l.lock_key = :key
    FOR UPDATE OF l NOWAIT
), released AS (
    UPDATE "{table}" SET
        locked = FALSE,
        hold_count = 0,
        expires_at = statement_timestamp(),
        fencing_token = greatest(nextval('"{table}_fence_seq"'), fencing_token + 1)
    FROM target
    WHERE "{table}".lock_key = target.lock_key
      AND locked
      AND lock_owner <> ''
      AND expires_at - statement_timestamp() > INTERVAL '0'
    RETURNING "{table}".lock_key
)
SELECT 1::BIGINT FROM released
WHERE pg_notify('{channel}', CAST(CAST('"{table}"' AS regclass) AS oid)::TEXT || ':' || lock_key) IS NOT NULL
UNION ALL
SELECT 0::BIGINT FROM gate WHERE NOT gate.open
