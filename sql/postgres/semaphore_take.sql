-- Takes up to :count free permits of a semaphore of :permits slots for :owner, in one
-- statement, under the semaphore's gate (semaphore_gate.sql, earlier in the same
-- transaction): each slot is a lease on the key :prefix || slot, slot 0 to
-- :permits - 1, taken when its row is missing, free or expired, as lease_acquire
-- takes a free key, or when it is a dead presence holder's (below). The caller counts
-- the rows that come back and rolls the transaction back unless all it asked for were
-- taken: k permits at once or none.
-- Slots only, never a re-entry: a slot of :owner's that is still live stays as it is,
-- and the caller gets other ones.
-- The token is drawn under the row lock, from the table's sequence (greatest() keeps
-- it rising past a token the sequence never issued), so tokens rise in grant order,
-- across the slots of a semaphore too: its grants are one at a time.
--
-- Presence, as lease_acquire.sql has it: a permit records the handle's marker :presence
-- only while a session holds it (marked says whether it did), stamped with the
-- server's lifetime (life); and a live permit of another owner whose row records a
-- marker of this lifetime that no session holds any more is free: its holder died.
-- The shared try keeps that marker until the transaction commits, so the holder
-- cannot take it back meanwhile. The dead holder's hold of the semaphore's name stays
-- counted (the name's mark counts this grant's permits as new holds): the name then
-- outlives its holds until its expiry, which costs a later holder of the name itself
-- time, never safety.
WITH life AS MATERIALIZED (
    SELECT ((CAST(extract(epoch FROM pg_postmaster_start_time()) * 1000000 AS BIGINT)
             # COALESCE(CAST(extract(epoch FROM (SELECT stats_reset FROM pg_stat_bgwriter))
                             * 1000000 AS BIGINT), 0))
            & 4294967295) << 32 AS stamp
), free AS (
    SELECT CAST(:prefix AS TEXT) || s.slot AS lock_key
    FROM generate_series(0, :permits - 1) AS s(slot)
    LEFT JOIN "{table}" AS o ON o.lock_key = CAST(:prefix AS TEXT) || s.slot
    WHERE o.lock_key IS NULL OR NOT o.locked OR o.expires_at <= statement_timestamp()
       OR (o.presence_key IS NOT NULL
           AND o.lock_owner <> :owner
           AND o.lock_strategy <> 'for-update'
           AND CASE WHEN (o.presence_key & -4294967296) = (SELECT stamp FROM life)
                    THEN pg_try_advisory_xact_lock_shared(1936813168,
                             CAST(o.presence_key & 2147483647 AS INTEGER))
                    ELSE FALSE END)
    ORDER BY s.slot
    LIMIT :count
)
INSERT INTO "{table}" AS l
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token, presence_key)
SELECT f.lock_key, :owner, 'lease', TRUE, statement_timestamp(), statement_timestamp(),
       :ttl_us, statement_timestamp() + :ttl_us * INTERVAL '1 microsecond',
       1, nextval('"{table}_fence_seq"'),
       CASE WHEN NULLIF(:presence, '') IS NULL THEN NULL
            WHEN pg_try_advisory_xact_lock_shared(1936813168,
                                                  CAST(NULLIF(:presence, '') AS INTEGER))
            THEN NULL
            ELSE life.stamp | CAST(NULLIF(:presence, '') AS BIGINT) END
FROM free AS f, life
ON CONFLICT (lock_key) DO UPDATE SET
    fencing_token = greatest(nextval('"{table}_fence_seq"'), l.fencing_token + 1),
    lock_owner = EXCLUDED.lock_owner,
    lock_strategy = EXCLUDED.lock_strategy,
    locked = TRUE,
    acquired_at = EXCLUDED.acquired_at,
    lock_time = EXCLUDED.lock_time,
    lock_duration = EXCLUDED.lock_duration,
    expires_at = EXCLUDED.expires_at,
    hold_count = 1,
    presence_key = EXCLUDED.presence_key
WHERE NOT l.locked
   OR l.expires_at <= EXCLUDED.lock_time
   OR (l.presence_key IS NOT NULL
       AND l.lock_owner <> EXCLUDED.lock_owner
       AND l.lock_strategy <> 'for-update'
       AND CASE WHEN (l.presence_key & -4294967296) = (SELECT stamp FROM life)
                THEN pg_try_advisory_xact_lock_shared(1936813168,
                                               CAST(l.presence_key & 2147483647 AS INTEGER))
                ELSE FALSE END)
RETURNING
    l.lock_key,
    l.fencing_token,
    (extract(epoch FROM l.expires_at) * 1000000)::BIGINT AS expires_us,
    1::BIGINT AS taken,
    CAST(CASE WHEN l.presence_key IS NULL THEN 0 ELSE 1 END AS BIGINT) AS marked
