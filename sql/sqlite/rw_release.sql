-- The write side's release: one hold of the write side of the read-write lock :key
-- (its row records 'write') given back if it is still ours: same owner, same token,
-- unexpired. With the last:
-- - when :owner holds a live read of :key (a downgrade: the writer took the read
--   side), the name goes to that read in shared mode at once, with no moment free:
--   no owner, 'read', one hold, expiring with the read, its fencing token kept; other
--   readers then get in, and writers keep waiting;
-- - otherwise the name is free (locked = 0, expiring now), as a lease's release
--   leaves it.
-- The table decides, not the caller: every release of a write side (its guard's, a
-- dropped guard's, the give-back of an attempt whose caller stopped waiting) is this
-- statement, so none frees the name under its owner's read. SQLite runs one writer
-- at a time, and every assignment reads the row as it was. Times are microseconds
-- since the Unix epoch.
UPDATE "{table}" AS n SET
    locked = n.hold_count > 1 OR d.read_until IS NOT NULL,
    lock_owner = CASE WHEN n.hold_count > 1 OR d.read_until IS NULL THEN n.lock_owner
                      ELSE '' END,
    lock_strategy = CASE WHEN n.hold_count > 1 OR d.read_until IS NULL THEN n.lock_strategy
                         ELSE 'read' END,
    acquired_at = CASE WHEN n.hold_count > 1 OR d.read_until IS NULL THEN n.acquired_at
                       ELSE d.now END,
    lock_time = CASE WHEN n.hold_count > 1 OR d.read_until IS NULL THEN n.lock_time
                     ELSE d.now END,
    lock_duration = CASE WHEN n.hold_count > 1 OR d.read_until IS NULL THEN n.lock_duration
                         ELSE d.read_until - d.now END,
    expires_at = CASE WHEN n.hold_count > 1 THEN n.expires_at
                      WHEN d.read_until IS NULL THEN d.now
                      ELSE d.read_until END,
    hold_count = CASE WHEN n.hold_count > 1 THEN n.hold_count - 1
                      WHEN d.read_until IS NULL THEN 0
                      ELSE 1 END
FROM (SELECT t.now,
             (SELECT r.expires_at FROM "{table}" AS r
              WHERE r.lock_key = :key || '@read:' || :owner
                AND r.lock_owner = :owner
                AND r.locked
                AND r.hold_count > 0
                AND r.expires_at > t.now) AS read_until
      FROM (SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) AS now) AS t
     ) AS d
WHERE n.lock_key = :key
  AND n.lock_owner = :owner
  AND n.fencing_token = :token
  AND n.lock_strategy = 'write'
  AND n.locked
  AND n.expires_at > d.now
