-- The for-update strategy: create the key's row, free, when it has none, so that there
-- is a row to lock. Sent on its own, outside the locking transaction, only after a
-- lock attempt found no row; the duplicate check may wait for a concurrent creator,
-- for one second at most.
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
INSERT IGNORE INTO `{table}`
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token)
VALUES
    (:key, '', 'for-update', FALSE, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), 0,
     UTC_TIMESTAMP(6), 0, NEXTVAL(`{table}_fence_seq`))
