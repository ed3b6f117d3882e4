-- A read's mark of the read-write lock's name :key, in the read's transaction, right
-- after the read hold was granted (rw_read.sql): the name's own row is held in shared
-- mode by reads, so that every other acquisition of the name, of any primitive, finds
-- it held by another owner and busy. In shared mode the row has no owner (''),
-- lock_strategy 'read', counts the read holds in hold_count, and expires no sooner
-- than any of them:
-- - free, missing or expired: taken in shared mode, one hold, a new fencing token;
-- - held by reads: :count more holds (1 for a new read hold, 0 for a re-entry), its
--   expiry pushed to at least :ttl_us from now, and no sooner than the read hold's
--   (read from its row: the hold's statement read the clock a moment before, and a
--   clock stepped back between the two must not leave the name short of the hold);
-- - held by :owner as the write side (recorded 'write', with holds: a downgrade):
--   left so, its expiry pushed as well (the write's release leaves the name to the
--   read, rw_release.sql);
-- - anything else (a lock of any owner, this one's included; a semaphore's
--   permits): left as it is.
-- One row comes back, 1, when the name is marked; none otherwise, and the caller rolls
-- the read back (busy). Sent in the read's writing transaction: SQLite runs one at a
-- time. A fresh row's token is one above the floor of deleted rows' tokens; an
-- existing row's grows by one when it is taken afresh. Times are microseconds since
-- the Unix epoch.
INSERT INTO "{table}" AS n
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token)
SELECT :key, '', 'read', 1, t.now, t.now, :ttl_us,
       max(t.now + :ttl_us, coalesce((SELECT h.expires_at FROM "{table}" AS h
                                      WHERE h.lock_key = :key || '@read:' || :owner), 0)),
       1, (SELECT floor + 1 FROM "{table}_fence" WHERE id = 1)
FROM (SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) AS now) AS t
WHERE TRUE
ON CONFLICT (lock_key) DO UPDATE SET
    fencing_token = CASE WHEN NOT n.locked OR n.expires_at <= excluded.lock_time
        THEN n.fencing_token + 1 ELSE n.fencing_token END,
    hold_count = CASE WHEN NOT n.locked OR n.expires_at <= excluded.lock_time THEN 1
        WHEN n.lock_owner = '' THEN n.hold_count + :count
        ELSE n.hold_count END,
    acquired_at = CASE WHEN NOT n.locked OR n.expires_at <= excluded.lock_time
        THEN excluded.acquired_at ELSE n.acquired_at END,
    lock_owner = CASE WHEN NOT n.locked OR n.expires_at <= excluded.lock_time
        THEN '' ELSE n.lock_owner END,
    lock_strategy = CASE WHEN NOT n.locked OR n.expires_at <= excluded.lock_time
        THEN 'read' ELSE n.lock_strategy END,
    expires_at = CASE WHEN NOT n.locked OR n.expires_at <= excluded.lock_time
        THEN excluded.expires_at ELSE max(n.expires_at, excluded.expires_at) END,
    lock_duration = max(:ttl_us, n.expires_at - excluded.lock_time),
    lock_time = excluded.lock_time,
    locked = 1
WHERE NOT n.locked
   OR n.expires_at <= excluded.lock_time
   OR (n.lock_owner = '' AND n.lock_strategy = 'read')
   OR (n.lock_owner = :owner AND n.lock_strategy = 'write' AND n.hold_count > 0)
RETURNING 1
