-- The for-update strategy, with the row locked: record the holder and draw its
-- fencing token, inside the holder's transaction. MariaDB has no UPDATE ... RETURNING:
-- the token comes back through LAST_INSERT_ID(expr). The row stays "free" as a lease
-- (locked = FALSE): the row lock is what excludes others.
UPDATE `{table}` SET
    fencing_token = LAST_INSERT_ID(GREATEST(NEXTVAL(`{table}_fence_seq`), fencing_token + 1)),
    lock_owner = :owner,
    lock_strategy = 'for-update',
    acquired_at = UTC_TIMESTAMP(6),
    lock_time = UTC_TIMESTAMP(6)
WHERE lock_key = :key
