-- The for-update strategy, with the row locked: record the holder and draw its
-- fencing token, inside the holder's transaction. No row matches when a live lease or
-- insert lock holds the key: one key is held by one strategy at a time, and a
-- for-update attempt never takes over a live lease. MariaDB has no UPDATE ...
-- RETURNING: the token comes back through LAST_INSERT_ID(expr). The row stays free as
-- a lease (locked = FALSE): the row lock is what excludes others. The condition is
-- read before any assignment.
UPDATE `{table}` SET
    fencing_token = LAST_INSERT_ID(GREATEST(NEXTVAL(`{table}_fence_seq`), fencing_token + 1)),
    lock_owner = :owner,
    lock_strategy = 'for-update',
    locked = FALSE,
    hold_count = 0,
    acquired_at = UTC_TIMESTAMP(6),
    lock_time = UTC_TIMESTAMP(6),
    lock_duration = 0,
    expires_at = UTC_TIMESTAMP(6),
    -- A for-update holder's presence is its transaction: no marker.
    presence_key = NULL
WHERE lock_key = :key
  AND NOT (locked AND expires_at > UTC_TIMESTAMP(6))
