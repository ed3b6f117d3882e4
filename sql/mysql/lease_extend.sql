-- Push the expiry of a lease we still hold to at least :ttl_us from now on the database
-- clock; an expiry already later stays (an extension never shortens a lease, so a
-- renewal in flight and an extension cannot undo each other).
-- MariaDB has no UPDATE ... RETURNING, so the new expiry (microseconds since the epoch)
-- comes back in the OK packet through LAST_INSERT_ID(expr); no row matches when the
-- lease lapsed, was released or was taken, or has no hold left (revoked by an
-- operator, whose holder is to give it back).
-- A second at most on a row lock: the row of a lease that lapsed may be held by a
-- for-update holder for a whole transaction. A row still locked then fails the
-- statement; lease_held, which waits on nothing, then tells whether the lease is still
-- ours (a short lock: try again) or not (nothing to do). Short locks (another owner's
-- attempt on a held key) are simply waited out.
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
UPDATE `{table}` SET
    lock_time = UTC_TIMESTAMP(6),
    lock_duration = GREATEST(:ttl_us, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)),
    expires_at = GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL :ttl_us MICROSECOND),
    hold_count = hold_count
        + 0 * LAST_INSERT_ID(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', expires_at))
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND hold_count > 0
  AND expires_at > UTC_TIMESTAMP(6)
