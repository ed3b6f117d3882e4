-- The locks held now (locked and unexpired on the database clock), by key, with the
-- database's own time so that "expires in" needs no client clock, and how many live
-- waiters of the fair strategy are queued for each, and whether each holder is gone.
WITH life AS MATERIALIZED (
    SELECT ((CAST(extract(epoch FROM pg_postmaster_start_time()) * 1000000 AS BIGINT)
             # COALESCE(CAST(extract(epoch FROM (SELECT stats_reset FROM pg_stat_bgwriter))
                             * 1000000 AS BIGINT), 0))
            & 4294967295) << 32 AS stamp
)
SELECT lock_key,
       lock_strategy,
       lock_owner,
       fencing_token,
       hold_count,
       (extract(epoch FROM acquired_at) * 1000000)::BIGINT AS acquired_us,
       (extract(epoch FROM expires_at) * 1000000)::BIGINT AS expires_us,
       (extract(epoch FROM statement_timestamp()) * 1000000)::BIGINT AS now_us,
       (SELECT count(*) FROM "{table}_queue" AS q
        WHERE q.lock_key = "{table}".lock_key
          AND q.granted_token IS NULL
          AND q.expires_at > statement_timestamp()) AS waiters,
       -- Whether the holder is gone: its lease records a presence marker of this
       -- server's lifetime that no session holds any more, so that the next
       -- acquisition takes it at once (as lease_acquire.sql decides it; the shared
       -- try holds the marker only until this statement ends).
       CASE WHEN presence_key IS NOT NULL
                 AND lock_strategy <> 'for-update'
                 AND (presence_key & -4294967296) = (SELECT stamp FROM life)
            THEN CASE WHEN pg_try_advisory_xact_lock_shared(1936813168,
                                   CAST(presence_key & 2147483647 AS INTEGER))
                      THEN CAST(1 AS BIGINT) ELSE CAST(0 AS BIGINT) END
            ELSE CAST(0 AS BIGINT) END AS gone
FROM "{table}"
WHERE locked
  AND expires_at > statement_timestamp()
ORDER BY lock_key
LIMIT :limit
