-- Takes up to :count free permits of a semaphore of :permits slots for :owner, in one
-- statement, under the semaphore's gate (semaphore_gate.sql, earlier in the same
-- transaction): each slot is a lease on the key :prefix || slot, slot 0 to
-- :permits - 1, taken when its row is missing, free or expired, as lease_acquire
-- takes a free key. The caller counts the rows that come back and rolls the
-- transaction back unless all it asked for were taken: k permits at once or none.
-- Slots only, never a re-entry: a slot of :owner's that is still live stays as it is,
-- and the caller gets other ones.
-- The token is drawn under the row lock, from the table's sequence (greatest() keeps
-- it rising past a token the sequence never issued), so tokens rise in grant order,
-- across the slots of a semaphore too: its grants are one at a time.
WITH free AS (
    SELECT CAST(:prefix AS TEXT) || s.slot AS lock_key
    FROM generate_series(0, :permits - 1) AS s(slot)
    LEFT JOIN "{table}" AS o ON o.lock_key = CAST(:prefix AS TEXT) || s.slot
    WHERE o.lock_key IS NULL OR NOT o.locked OR o.expires_at <= statement_timestamp()
    ORDER BY s.slot
    LIMIT :count
)
INSERT INTO "{table}" AS l
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token)
SELECT f.lock_key, :owner, 'lease', TRUE, statement_timestamp(), statement_timestamp(),
       :ttl_us, statement_timestamp() + :ttl_us * INTERVAL '1 microsecond',
       1, nextval('"{table}_fence_seq"')
FROM free AS f
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
    presence_key = NULL
WHERE NOT l.locked OR l.expires_at <= EXCLUDED.lock_time
RETURNING
    l.lock_key,
    l.fencing_token,
    (extract(epoch FROM l.expires_at) * 1000000)::BIGINT AS expires_us,
    1::BIGINT AS taken
