-- Push the expiry of a lease we still hold to at least :ttl_us from now on the database
-- clock; an expiry already later stays (an extension never shortens a lease, so a
-- renewal in flight and an extension cannot undo each other). No row comes back when
-- the lease lapsed, was released or was taken, or has no hold left (revoked by an
-- operator, whose holder is to give it back).
-- Expiry is compared as a difference, which no index serves, so that the planner
-- finds the row by its key: on a table with few live leases it would otherwise pick
-- the expiry index and read every live lease.
UPDATE "{table}" SET
    lock_time = statement_timestamp(),
    lock_duration = greatest(:ttl_us,
        (extract(epoch FROM expires_at - statement_timestamp()) * 1000000)::BIGINT),
    expires_at = greatest(expires_at, statement_timestamp() + :ttl_us * INTERVAL '1 microsecond')
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND hold_count > 0
  AND expires_at - statement_timestamp() > INTERVAL '0'
RETURNING (extract(epoch FROM expires_at) * 1000000)::BIGINT AS expires_us
