-- Make sure :key has a lock row to hand over: a free one when it has none. No wait on
-- a row lock: a for-update holder keeps the key's row locked for its whole
-- transaction, and the duplicate check would wait for it; a locked row fails this
-- statement alone at once (the lock is held: nothing to hand over).
SET STATEMENT innodb_lock_wait_timeout = 0 FOR
INSERT IGNORE INTO `{table}`
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token)
VALUES
    (:key, '', 'fair', FALSE, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), 0,
     UTC_TIMESTAMP(6), 0, 0)
