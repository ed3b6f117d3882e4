-- A waiter's standing: the fencing token of the grant handed to it (0 for none), how
-- many live waiters without a grant are ahead of it (a waiter handed the lock holds
-- it: the next one is the first to wait, and finds the lock free should its holder,
-- who never took the grant up, be gone), and whether the lock is free to hand on (1: no
-- row, a free row, a lapsed lease, or a lease whose holder's presence marker is gone,
-- as fair_take.sql finds it; the first waiter then polls under the key's gate, which
-- hands it on). No row when its place is gone.
-- And the holder: the key of the presence marker a live lease of another owner records,
-- stamped with this server's lifetime (NULL for none), for the first waiter to wait in
-- the server for the moment that marker is freed (marker_wait.sql) rather than sleep
-- to its next poll. A hint only: the poll under the gate decides, as always.
WITH life AS MATERIALIZED (
    SELECT ((CAST(extract(epoch FROM pg_postmaster_start_time()) * 1000000 AS BIGINT)
             # COALESCE(CAST(extract(epoch FROM (SELECT stats_reset FROM pg_stat_bgwriter))
                             * 1000000 AS BIGINT), 0))
            & 4294967295) << 32 AS stamp
)
SELECT COALESCE(q.granted_token, 0)::BIGINT,
       (SELECT count(*) FROM "{table}_queue" AS a
        WHERE a.lock_key = q.lock_key
          AND a.ticket < q.ticket
          AND a.granted_token IS NULL
          AND a.expires_at > statement_timestamp())::BIGINT,
       CASE WHEN EXISTS (SELECT 1 FROM "{table}" AS l
                         WHERE l.lock_key = q.lock_key
                           AND l.locked
                           AND l.expires_at > statement_timestamp()
                           AND NOT (l.presence_key IS NOT NULL
                                    AND l.lock_owner <> q.lock_owner
                                    AND l.lock_strategy <> 'for-update'
                                    AND CASE WHEN (l.presence_key & -4294967296)
                                                  = (SELECT stamp FROM life)
                                             THEN pg_try_advisory_xact_lock_shared(1936813168,
                                                 CAST(l.presence_key & 2147483647 AS INTEGER))
                                             ELSE FALSE END))
            THEN 0 ELSE 1 END::BIGINT,
       (SELECT CAST(l.presence_key & 2147483647 AS TEXT) FROM "{table}" AS l, life
        WHERE l.lock_key = q.lock_key
          AND l.locked
          AND l.expires_at > statement_timestamp()
          AND l.presence_key IS NOT NULL
          AND l.lock_owner <> q.lock_owner
          AND l.lock_strategy <> 'for-update'
          AND (l.presence_key & -4294967296) = life.stamp) AS holder
FROM "{table}_queue" AS q
WHERE q.ticket = :ticket
  AND q.lock_key = :key
