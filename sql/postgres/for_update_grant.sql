-- The for-update strategy, with the row locked: record the holder and draw its
-- fencing token, inside the holder's transaction (a rollback undoes all but the
-- sequence, so tokens still rise). The row stays "free" as a lease (locked = FALSE):
-- the row lock is what excludes others, and it ends with the transaction.
UPDATE "{table}" SET
    fencing_token = greatest(nextval('"{table}_fence_seq"'), fencing_token + 1),
    lock_owner = :owner,
    lock_strategy = 'for-update',
    acquired_at = statement_timestamp(),
    lock_time = statement_timestamp()
WHERE lock_key = :key
RETURNING fencing_token
