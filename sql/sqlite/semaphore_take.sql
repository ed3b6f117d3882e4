-- Takes up to :count free permits of a semaphore of :permits slots for :owner, in one
-- statement, under the semaphore's gate (semaphore_gate.sql, earlier in the same
-- transaction): each slot is a lease on the key :prefix || slot, slot 0 to
-- :permits - 1, taken when its row is missing, free or expired, as lease_acquire
-- takes a free key. The caller counts the rows that come back and rolls the
-- transaction back unless all it asked for were taken: k permits at once or none.
-- Slots only, never a re-entry: a slot of :owner's that is still live stays as it is.
-- A fresh row's token is one above the floor of deleted rows' tokens (see the lock
-- table's migration); an existing row's grows by one: a slot's tokens rise.
-- Times are microseconds since the Unix epoch; 'now' is one instant for the whole
-- statement.
-- Presence: SQLite keeps no marker in the table. :gone is a JSON array of owners whose
-- presence marker files the caller found free and holds while this statement runs
-- ('[]' for none): their processes died, and their live permits are free too. Their
-- holds of the semaphore's name stay counted (the name's mark counts this grant's
-- permits as new holds): the name then outlives its holds until its expiry, which
-- costs a later holder of the name itself time, never safety.
WITH RECURSIVE seq (slot) AS (
    SELECT 0 UNION ALL SELECT slot + 1 FROM seq WHERE slot + 1 < :permits
)
INSERT INTO "{table}" AS l
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token)
SELECT :prefix || seq.slot, :owner, 'lease', 1, n.now, n.now, :ttl_us, n.now + :ttl_us, 1,
       (SELECT floor + 1 FROM "{table}_fence" WHERE id = 1)
FROM seq
CROSS JOIN (SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) AS now) AS n
LEFT JOIN "{table}" AS o ON o.lock_key = :prefix || seq.slot
WHERE o.lock_key IS NULL OR NOT o.locked OR o.expires_at <= n.now
   OR (o.hold_count > 0 AND o.lock_owner IN (SELECT value FROM json_each(:gone)))
ORDER BY seq.slot
LIMIT :count
ON CONFLICT (lock_key) DO UPDATE SET
    fencing_token = l.fencing_token + 1,
    lock_owner = excluded.lock_owner,
    lock_strategy = excluded.lock_strategy,
    locked = 1,
    acquired_at = excluded.acquired_at,
    lock_time = excluded.lock_time,
    lock_duration = excluded.lock_duration,
    expires_at = excluded.expires_at,
    hold_count = 1
WHERE NOT l.locked OR l.expires_at <= excluded.lock_time
   OR (l.hold_count > 0 AND l.lock_owner IN (SELECT value FROM json_each(:gone)))
RETURNING lock_key, fencing_token, expires_at AS expires_us, 1 AS taken
