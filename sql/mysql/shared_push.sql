-- First in the extension of a hold of a name in shared mode (db/shared.rs): the name
-- :key is pushed to expire no sooner than :ttl_us from now, as the hold is next, in
-- the same transaction (lease_extend.sql), so that the name never expires before a
-- hold of it. It is pushed while it is live and held in shared mode, or by :owner (a
-- downgrade's name, held by its writer); no row matches otherwise, and the caller
-- extends nothing. An expiry already later stays. Assigned left to right: the
-- duration reads the new expiry. A second at most on a row lock.
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
UPDATE `{table}` SET
    lock_time = UTC_TIMESTAMP(6),
    expires_at = GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL :ttl_us MICROSECOND),
    lock_duration = TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
WHERE lock_key = :key
  AND (lock_owner = '' OR lock_owner = :owner)
  AND locked
  AND expires_at > UTC_TIMESTAMP(6)
