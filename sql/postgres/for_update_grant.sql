-- The for-update strategy, with the gate and the row locked: record the holder and
-- draw its fencing token, inside the holder's transaction (a rollback undoes all but
-- the sequence, so tokens still rise). No row comes back when a live lease or insert
-- lock holds the key: one key is held by one strategy at a time, and a for-update
-- attempt never takes over a live lease. The row stays free as a lease (locked =
-- FALSE): the row lock is what excludes others, and it ends with the transaction.
-- The lock_timeout the attempt set is put back to :setting, as it was before.
UPDATE "{table}" SET
    fencing_token = greatest(nextval('"{table}_fence_seq"'), fencing_token + 1),
    lock_owner = :owner,
    lock_strategy = 'for-update',
    locked = FALSE,
    hold_count = 0,
    acquired_at = statement_timestamp(),
    lock_time = statement_timestamp(),
    lock_duration = 0,
    expires_at = statement_timestamp(),
    -- A for-update holder's presence is its transaction: no marker.
    presence_key = NULL
WHERE lock_key = :key
  AND NOT (locked AND expires_at > statement_timestamp())
RETURNING fencing_token, set_config('lock_timeout', :setting, TRUE)
