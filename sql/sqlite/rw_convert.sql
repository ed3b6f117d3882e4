-- The write side's release, once its last hold was given back in the same transaction
-- (shared_release.sql freed the name): when :owner holds a live read of :key (a
-- downgrade: the writer took the read side), the name goes to that read in shared
-- mode at once, with no moment free: one hold, lasting as long as the read at least,
-- no owner, its fencing token kept. Other readers then get in, and writers keep
-- waiting. No row matches when the owner holds no read: the name stays free.
UPDATE "{table}" AS l SET
    locked = 1,
    lock_owner = '',
    lock_strategy = 'read',
    hold_count = 1,
    acquired_at = t.now,
    lock_time = t.now,
    lock_duration = r.expires_at - t.now,
    expires_at = max(l.expires_at, r.expires_at)
FROM (SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) AS now) AS t,
     "{table}" AS r
WHERE l.lock_key = :key
  AND l.lock_owner = :owner
  AND l.fencing_token = :token
  AND NOT l.locked
  AND r.lock_key = :key || '@read:' || :owner
  AND r.lock_owner = :owner
  AND r.locked
  AND r.hold_count > 0
  AND r.expires_at > t.now
