-- First in the extension of a hold of a name in shared mode (db/shared.rs): the name
-- :key is pushed to expire no sooner than :ttl_us from now, as the hold is next, in
-- the same transaction (lease_extend.sql), so that the name never expires before a
-- hold of it. It is pushed while it is live and held in shared mode, or by :owner (a
-- downgrade's name, held by its writer); no row matches otherwise, and the caller
-- extends nothing. An expiry already later stays.
UPDATE "{table}" SET
    lock_time = statement_timestamp(),
    lock_duration = greatest(:ttl_us,
        (extract(epoch FROM expires_at - statement_timestamp()) * 1000000)::BIGINT),
    expires_at = greatest(expires_at, statement_timestamp() + :ttl_us * INTERVAL '1 microsecond')
WHERE lock_key = :key
  AND (lock_owner = '' OR lock_owner = :owner)
  AND locked
  AND expires_at - statement_timestamp() > INTERVAL '0'
