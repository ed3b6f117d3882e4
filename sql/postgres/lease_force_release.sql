-- An operator's release of :key, whoever holds it. The token moves on, so the old
-- holder's renewals, releases and fenced writes all fail from now on.
-- It takes the key's advisory lock first, as acquisitions do (see lease_acquire), and
-- without waiting: a for-update holder keeps that lock for its whole transaction, and
-- an operator's call must not wait for it. Nor does it wait on the row (a fenced
-- transaction's shared lock): NOWAIT fails the statement (55P03), tried again. Rows
-- come back: 1 when a live lease was released, 0 when the gate was closed (try
-- again); none when nothing was held.
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
UNION ALL
SELECT 0::BIGINT FROM gate WHERE NOT gate.open
