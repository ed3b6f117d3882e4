-- A hold of a name in shared mode (a read of a read-write lock, a semaphore's permit)
-- gives back one hold of :key if it is still ours: same owner, same token, unexpired.
-- The last hold frees the row (locked = FALSE, expiring now). The holds left come
-- back through LAST_INSERT_ID(expr), 0 when this was the last; no row matches when
-- the hold was no longer ours. The caller then gives back the name's count
-- (shared_leave.sql) in the same transaction: the hold's row locked first, then the
-- name's. Assigned left to right: hold_count is read before it is decremented last.
-- A second at most on a row lock, as lease_release.sql: a row still locked then fails
-- the statement; lease_held, which waits on nothing, tells whether the hold is still
-- ours (a short lock: try again) or not (nothing to do).
-- A lease with no hold left, revoked by an operator (force_release), is freed at
-- once by its holder's release: that is the holder giving it back. The count never
-- goes below 0.
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
UPDATE `{table}` SET
    locked = hold_count > 1,
    expires_at = IF(hold_count > 1, expires_at, UTC_TIMESTAMP(6)),
    hold_count = LAST_INSERT_ID(GREATEST(hold_count - 1, 0))
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND expires_at > UTC_TIMESTAMP(6)
