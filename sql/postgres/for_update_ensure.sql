-- The for-update strategy: create the key's row, free, when it has none, so that there
-- is a row to lock. Sent on its own, outside the locking transaction, only after a
-- lock attempt found no row; a row that exists already is left alone.
INSERT INTO "{table}"
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token)
VALUES
    (:key, '', 'for-update', FALSE, statement_timestamp(), statement_timestamp(), 0,
     statement_timestamp(), 0, nextval('"{table}_fence_seq"'))
ON CONFLICT (lock_key) DO NOTHING
