-- Hand :key to the waiter :ticket (owner :owner) when the lock is free or expired: a
-- new grant with a new fencing token, lasting as long as the waiter's place does (the
-- waiter pushes it to its TTL when it takes the grant up), so a grant handed to a
-- waiter that died meanwhile lapses with its place. No row when the lock is held.
-- Presence: a live lock is free too when its row records a presence marker stamped
-- with this server's lifetime that no session holds any more, exactly as
-- lease_acquire.sql takes it (its holder's process died; the shared try keeps the
-- marker until this step commits). The grant handed on records the marker the
-- waiter's place records (fair_enqueue.sql), so that a grant handed to a waiter that
-- died meanwhile is free to the next waiter at once; the waiter records its current
-- one as it takes the grant up (fair_present.sql).
WITH life AS MATERIALIZED (
    SELECT ((CAST(extract(epoch FROM pg_postmaster_start_time()) * 1000000 AS BIGINT)
             # COALESCE(CAST(extract(epoch FROM (SELECT stats_reset FROM pg_stat_bgwriter))
                             * 1000000 AS BIGINT), 0))
            & 4294967295) << 32 AS stamp
)
UPDATE "{table}" AS l SET
    lock_owner = :owner,
    lock_strategy = 'fair',
    locked = TRUE,
    acquired_at = statement_timestamp(),
    lock_time = statement_timestamp(),
    lock_duration = (extract(epoch FROM q.expires_at - statement_timestamp()) * 1000000)::BIGINT,
    expires_at = q.expires_at,
    hold_count = 1,
    fencing_token = greatest(nextval('"{table}_fence_seq"'), l.fencing_token + 1),
    presence_key = q.presence_key
FROM "{table}_queue" AS q
WHERE l.lock_key = :key
  AND q.ticket = :ticket
  AND q.lock_key = :key
  AND q.expires_at > statement_timestamp()
  AND (NOT l.locked
       OR l.expires_at <= statement_timestamp()
       OR (l.presence_key IS NOT NULL
           AND l.lock_owner <> :owner
           AND l.lock_strategy <> 'for-update'
           AND CASE WHEN (l.presence_key & -4294967296) = (SELECT stamp FROM life)
                    THEN pg_try_advisory_xact_lock_shared(1936813168,
                                                   CAST(l.presence_key & 2147483647 AS INTEGER))
                    ELSE FALSE END))
RETURNING l.fencing_token
