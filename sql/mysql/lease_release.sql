-- Give back one hold of :key if it is still ours: same owner, same token, unexpired.
-- The last hold frees the row (locked = FALSE, expiring now); the row stays for reuse
-- until the sweeper reclaims it. Assigned left to right: hold_count is read before it
-- is decremented last.
-- A second at most on a row lock: the row of a lease that lapsed may be held by a
-- for-update holder for a whole transaction. A row still locked then fails the
-- statement; lease_held, which waits on nothing, then tells whether the lease is still
-- ours (a short lock: try again) or not (nothing to do). Short locks (another owner's
-- attempt on a held key) are simply waited out.
-- A lease with no hold left, revoked by an operator (force_release), is freed at
-- once by its holder's release: that is the holder giving it back. The count never
-- goes below 0.
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
UPDATE `{table}` SET
    locked = hold_count > 1,
    expires_at = IF(hold_count > 1, expires_at, UTC_TIMESTAMP(6)),
    hold_count = GREATEST(hold_count - 1, 0)
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND expires_at > UTC_TIMESTAMP(6)
