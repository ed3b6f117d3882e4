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
-- One row comes back, 1, when the name is marked; none otherwise (busy). Sent in the
-- acquisition's writing transaction: SQLite runs one at a time. Tokens as rw_mark.sql
-- draws them. Times are microseconds since the Unix epoch.
INSERT INTO "{table}" AS n
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token)
SELECT :key, '', 'semaphore', 1, t.now, t.now, :ttl_us,
       max(t.now + :ttl_us, coalesce((
           WITH RECURSIVE seq (slot) AS (
               SELECT 0 UNION ALL SELECT slot + 1 FROM seq WHERE slot + 1 < 1000
           )
           SELECT max(l.expires_at) FROM "{table}_semaphores" AS m
           JOIN seq ON seq.slot < m.permits
           JOIN "{table}" AS l ON l.lock_key = 'semaphore:' || m.name || '#' || seq.slot
           WHERE m.name = :key AND l.lock_owner = :owner AND l.locked), 0)),
       :count, (SELECT floor + 1 FROM "{table}_fence" WHERE id = 1)
FROM (SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) AS now) AS t
WHERE TRUE
ON CONFLICT (lock_key) DO UPDATE SET
    fencing_token = CASE WHEN NOT n.locked OR n.expires_at <= excluded.lock_time
        THEN n.fencing_token + 1 ELSE n.fencing_token END,
    hold_count = CASE WHEN NOT n.locked OR n.expires_at <= excluded.lock_time
        THEN excluded.hold_count ELSE n.hold_count + excluded.hold_count END,
    acquired_at = CASE WHEN NOT n.locked OR n.expires_at <= excluded.lock_time
        THEN excluded.acquired_at ELSE n.acquired_at END,
    expires_at = CASE WHEN NOT n.locked OR n.expires_at <= excluded.lock_time
        THEN excluded.expires_at ELSE max(n.expires_at, excluded.expires_at) END,
    lock_duration = max(:ttl_us, n.expires_at - excluded.lock_time),
    lock_owner = '',
    lock_strategy = 'semaphore',
    lock_time = excluded.lock_time,
    locked = 1
WHERE NOT n.locked
   OR n.expires_at <= excluded.lock_time
   OR (n.lock_owner = '' AND n.lock_strategy = 'semaphore')
RETURNING 1
