-- The write side's release: one hold of the write side of the read-write lock :key
-- (its row records 'write') given back if it is still ours: same owner, same token,
-- unexpired. With the last:
-- - when :owner holds a live read of :key (a downgrade: the writer took the read
--   side), the name goes to that read in shared mode at once, with no moment free:
--   no owner, 'read', one hold, expiring with the read, no presence marker, its
--   fencing token kept; other readers then get in, and writers keep waiting;
-- - otherwise the name is free (locked = FALSE, expiring now), as a lease's release
--   leaves it.
-- The table decides, not the caller: every release of a write side (its guard's, a
-- dropped guard's, the give-back of an attempt whose caller stopped waiting) is this
-- statement, so none frees the name under its owner's read. One row per release.
-- The read's row is read with a shared lock (LOCK IN SHARE MODE: a locking read sees
-- the latest committed row): a release of the read under way in another transaction
-- (which leaves the name alone: it is the writer's then) is waited for and its outcome
-- seen, so the name never counts a read that is gone. The subquery names no column of
-- the row updated: MariaDB evaluates it once, before it reads (and locks) the name's
-- row, so the read's row is locked first: holds before their names, as every statement
-- that locks both. A read of :owner granted at the same moment is not this statement's
-- concern: the handle sends no release of its write side while a read of its own of
-- the name is under way (strategy/release.rs).
-- MariaDB assigns from left to right, each assignment seeing those before it: the
-- read's expiry is read first, into @sqlock_read (NULL: no live read), and every
-- assignment reads it and hold_count, which is assigned last.
-- A second at most on a row lock, as lease_release.sql: a row still locked then fails
-- the statement; lease_held, which waits on nothing, tells whether the write is still
-- ours (a short lock: try again) or not (nothing to do).
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
UPDATE `{table}` SET
    lock_time = IF((@sqlock_read := (SELECT r.expires_at FROM `{table}` AS r
                                     WHERE r.lock_key = CONCAT(:key, '@read:', :owner)
                                       AND r.lock_owner = :owner
                                       AND r.locked
                                       AND r.hold_count > 0
                                       AND r.expires_at > UTC_TIMESTAMP(6)
                                     LOCK IN SHARE MODE)) IS NULL OR hold_count > 1,
                   lock_time, UTC_TIMESTAMP(6)),
    lock_duration = IF(@sqlock_read IS NULL OR hold_count > 1, lock_duration,
                       TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), @sqlock_read)),
    acquired_at = IF(@sqlock_read IS NULL OR hold_count > 1, acquired_at, UTC_TIMESTAMP(6)),
    presence_key = IF(@sqlock_read IS NULL OR hold_count > 1, presence_key, NULL),
    lock_strategy = IF(@sqlock_read IS NULL OR hold_count > 1, lock_strategy, 'read'),
    lock_owner = IF(@sqlock_read IS NULL OR hold_count > 1, lock_owner, ''),
    expires_at = IF(hold_count > 1, expires_at, COALESCE(@sqlock_read, UTC_TIMESTAMP(6))),
    locked = hold_count > 1 OR @sqlock_read IS NOT NULL,
    hold_count = IF(hold_count > 1, hold_count - 1, IF(@sqlock_read IS NULL, 0, 1))
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND lock_strategy = 'write'
  AND locked
  AND expires_at > UTC_TIMESTAMP(6)
