-- The insert strategy's release of its last hold: delete the row, so that a free lock
-- is no row at all. Matches only when the lease is still ours (owner, token, unexpired)
-- with one hold left; otherwise lease_release gives back one of several holds.
-- A second at most on a row lock: the row of a lease that lapsed may be held by a
-- for-update holder for a whole transaction. A row still locked then fails the
-- statement; lease_held, which waits on nothing, then tells whether the lease is still
-- ours (a short lock: try again) or not (nothing to do). Short locks (another owner's
-- attempt on a held key) are simply waited out.
-- A row with no hold left, revoked by an operator (force_release), is deleted by its
-- holder's release too: that is the holder giving it back.
-- A row fair waiters are queued for (queued, see the migration) is not deleted: it
-- carries the flag, and is freed instead (lease_release, which the caller sends when
-- this changes nothing), for the queue to hand it on.
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
DELETE FROM `{table}`
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND NOT queued
  AND hold_count <= 1
  AND expires_at > UTC_TIMESTAMP(6)
