-- A semaphore's mark of its name :key, last in an acquisition's transaction, once its
-- :count permits were taken (semaphore_take.sql): the name's own row is held in shared
-- mode by permits, so that every other acquisition of the name, of any primitive,
-- finds it held by another owner and busy. In shared mode the row has no owner (''),
-- lock_strategy 'semaphore', counts the permits held in hold_count, and expires no
-- sooner than any of them:
-- - free, missing or expired: taken in shared mode, :count holds, a new fencing token;
-- - held by permits: :count more holds, its expiry pushed to at least :ttl_us from now,
--   and no sooner than any live permit of :owner's (read from their rows: the permits
--   taken in this transaction read the clock a moment before, and a clock stepped
--   back between the two must not leave the name short of them);
-- - anything else (a lock of any strategy, reads of a read-write lock): left as it is.
-- The key's gate first, the transaction-scoped advisory lock every acquisition of the
-- name takes, without waiting: a for-update holder keeps it for its whole transaction
-- and reads hold it shared for theirs, so the mark never waits on such a holder's row
-- lock. Rows: 1 when the name is marked, 2 when the gate was closed (contention: the
-- caller rolls back and tries again), none when the name is held otherwise (busy).
WITH gate AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock(hashtextextended(:key, hashtext('{table}'))) AS open
), marked AS (
INSERT INTO "{table}" AS n
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token, presence_key)
SELECT :key, '', 'semaphore', TRUE, statement_timestamp(), statement_timestamp(), :ttl_us,
       greatest(statement_timestamp() + :ttl_us * INTERVAL '1 microsecond',
                (SELECT max(l.expires_at) FROM "{table}_semaphores" AS m
                 CROSS JOIN generate_series(0, m.permits - 1) AS s(slot)
                 JOIN "{table}" AS l ON l.lock_key = 'semaphore:' || m.name || '#' || s.slot
                 WHERE m.name = :key AND l.lock_owner = :owner AND l.locked)),
       CAST(:count AS INTEGER), nextval('"{table}_fence_seq"'), NULL
FROM gate
WHERE gate.open
ON CONFLICT (lock_key) DO UPDATE SET
    fencing_token = CASE WHEN NOT n.locked OR n.expires_at <= EXCLUDED.lock_time
        THEN greatest(nextval('"{table}_fence_seq"'), n.fencing_token + 1)
        ELSE n.fencing_token END,
    hold_count = CASE WHEN NOT n.locked OR n.expires_at <= EXCLUDED.lock_time
        THEN EXCLUDED.hold_count
        ELSE n.hold_count + EXCLUDED.hold_count END,
    acquired_at = CASE WHEN NOT n.locked OR n.expires_at <= EXCLUDED.lock_time
        THEN EXCLUDED.acquired_at ELSE n.acquired_at END,
    expires_at = CASE WHEN NOT n.locked OR n.expires_at <= EXCLUDED.lock_time
        THEN EXCLUDED.expires_at ELSE greatest(n.expires_at, EXCLUDED.expires_at) END,
    lock_duration = greatest(:ttl_us,
        (extract(epoch FROM n.expires_at - EXCLUDED.lock_time) * 1000000)::BIGINT),
    lock_owner = '',
    lock_strategy = 'semaphore',
    lock_time = EXCLUDED.lock_time,
    locked = TRUE,
    presence_key = NULL
WHERE NOT n.locked
   OR n.expires_at <= EXCLUDED.lock_time
   OR (n.lock_owner = '' AND n.lock_strategy = 'semaphore')
RETURNING 1::BIGINT AS marked
)
SELECT marked FROM marked
UNION ALL
SELECT 2::BIGINT FROM gate WHERE NOT gate.open
