-- insert_release for a lock taken with an at-least hold (LockRequest::at_least): delete
-- the row of the last hold, when the lease is still ours, only once :at_least_us has
-- passed since it was taken (acquired_at, on the database clock). Before that nothing
-- matches, and lease_release_at_least keeps the row until the hold ends.
-- A second at most on a row lock, as insert_release.
-- A row with no hold left, revoked by an operator (force_release), is deleted by its
-- holder's release at once, whatever its at-least hold: that is the holder giving it
-- back, and a revoked lease never outlasts the expiry it had.
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
  AND expires_at > UTC_TIMESTAMP(6)
  AND (hold_count = 0
       OR (hold_count = 1 AND acquired_at + INTERVAL :at_least_us MICROSECOND <= UTC_TIMESTAMP(6)))
