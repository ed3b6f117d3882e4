-- A read hold of the read-write lock :key for :owner: the row ':key@read:<owner>', a
-- lease of its own, re-entered when this owner holds it live, and taken when
-- - the name :key itself is free, held in shared mode by reads (rw_mark.sql), or held
--   by :owner as the write side (its row records 'write', with holds: a downgrade);
--   any other hold of the name (a lock of any strategy, this owner's own included, a
--   semaphore's permits) is busy, and
-- - no other owner waits to write (a live row ':key@write:<owner>', a waiting writer's
--   intent), unless this owner holds the write side (a downgrade): readers that
--   arrive after a waiting writer wait behind it.
-- This only decides the read hold: the same transaction marks the name next
-- (rw_mark.sql), which tests the name's row again and rolls the read back unless the
-- name is marked.
-- Sent in a writing transaction (rw_gate.sql first): SQLite runs one at a time, so no
-- grant of :key commits meanwhile. The waiting writers' intents are a range of the
-- primary key (between ':key@write:' and ':key@write;' in its binary collation).
-- Times are microseconds since the Unix epoch.
-- A fresh row's token is one above the floor of deleted rows' tokens; an existing
-- row's grows by one on every new grant. No row comes back when the read is not
-- granted; the row's hold_count tells a new hold (1) from a re-entry.
INSERT INTO "{table}" AS l
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token)
SELECT :key || '@read:' || :owner, :owner, :strategy, 1, n.now, n.now, :ttl_us,
       n.now + :ttl_us, 1, (SELECT floor + 1 FROM "{table}_fence" WHERE id = 1)
FROM (SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) AS now) AS n
WHERE EXISTS (
        SELECT 1 FROM "{table}" AS m
        WHERE m.lock_key = :key || '@read:' || :owner
          AND m.locked AND m.expires_at > n.now
          AND m.lock_owner = :owner AND m.hold_count > 0)
   OR (NOT EXISTS (
        SELECT 1 FROM "{table}" AS w
        WHERE w.lock_key = :key AND w.locked AND w.expires_at > n.now
          AND NOT (w.lock_owner = '' AND w.lock_strategy = 'read')
          AND NOT (w.lock_owner = :owner AND w.lock_strategy = 'write' AND w.hold_count > 0))
       AND (EXISTS (
        SELECT 1 FROM "{table}" AS o
        WHERE o.lock_key = :key AND o.locked AND o.expires_at > n.now
          AND o.lock_owner = :owner AND o.lock_strategy = 'write' AND o.hold_count > 0)
        OR NOT EXISTS (
        SELECT 1 FROM "{table}" AS i
        WHERE i.lock_key >= :key || '@write:' AND i.lock_key < :key || '@write;'
          AND length(i.lock_key) = length(:key) + 43
          AND i.locked AND i.expires_at > n.now
          AND i.lock_owner <> :owner)))
ON CONFLICT (lock_key) DO UPDATE SET
    fencing_token = CASE
        WHEN l.locked AND l.lock_owner = excluded.lock_owner AND l.expires_at > excluded.lock_time
        THEN l.fencing_token
        ELSE l.fencing_token + 1 END,
    hold_count = CASE
        WHEN l.locked AND l.lock_owner = excluded.lock_owner AND l.expires_at > excluded.lock_time
        THEN l.hold_count + 1
        ELSE 1 END,
    expires_at = CASE
        WHEN l.locked AND l.lock_owner = excluded.lock_owner AND l.expires_at > excluded.lock_time
        THEN max(l.expires_at, excluded.expires_at)
        ELSE excluded.expires_at END,
    acquired_at = CASE
        WHEN l.locked AND l.lock_owner = excluded.lock_owner AND l.expires_at > excluded.lock_time
        THEN l.acquired_at
        ELSE excluded.acquired_at END,
    lock_owner = excluded.lock_owner,
    lock_strategy = excluded.lock_strategy,
    locked = 1,
    lock_time = excluded.lock_time,
    lock_duration = excluded.lock_duration
WHERE NOT l.locked
   OR l.expires_at <= excluded.lock_time
   OR (l.lock_owner = excluded.lock_owner AND l.lock_strategy = excluded.lock_strategy
       AND l.hold_count > 0)
RETURNING lock_owner, fencing_token, expires_at AS expires_us, hold_count, lock_strategy
