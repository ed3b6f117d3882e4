-- An operator's release of :key, whoever holds it. The token moves on, so the old
-- holder's renewals, releases and fenced writes all fail from now on.
-- It takes the key's advisory lock first, as acquisitions do, so that no acquisition
-- waiting with a token already drawn sees this one overtake it.
-- Expiry is compared as a difference, which no index serves, so that the planner
-- finds the row by its key: on a table with few live leases it would otherwise pick
-- the expiry index and read every live lease.
WITH serialized AS (
    SELECT pg_advisory_xact_lock(hashtext('{table}'), hashtext(:key)) AS done
)
UPDATE "{table}" SET
    locked = FALSE,
    hold_count = 0,
    expires_at = statement_timestamp(),
    fencing_token = greatest(nextval('"{table}_fence_seq"'), fencing_token + 1)
FROM serialized
WHERE lock_key = :key
  AND locked
  AND expires_at - statement_timestamp() > INTERVAL '0'
