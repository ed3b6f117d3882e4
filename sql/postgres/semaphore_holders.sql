-- The live permits of a semaphore of :permits slots on the keys :prefix || slot, as
-- list.sql shows locks, by slot, with whether each holder is gone (as list.sql says
-- it). :owner, :count, :ttl_us, :presence and :gone are not read.
WITH life AS MATERIALIZED (
    SELECT ((CAST(extract(epoch FROM pg_postmaster_start_time()) * 1000000 AS BIGINT)
             # COALESCE(CAST(extract(epoch FROM (SELECT stats_reset FROM pg_stat_bgwriter))
                             * 1000000 AS BIGINT), 0))
            & 4294967295) << 32 AS stamp
)
SELECT l.lock_key,
       l.lock_strategy,
       l.lock_owner,
       l.fencing_token,
       l.hold_count,
       (extract(epoch FROM l.acquired_at) * 1000000)::BIGINT AS acquired_us,
       (extract(epoch FROM l.expires_at) * 1000000)::BIGINT AS expires_us,
       (extract(epoch FROM statement_timestamp()) * 1000000)::BIGINT AS now_us,
       0::BIGINT AS waiters,
       CASE WHEN l.presence_key IS NOT NULL
                 AND (l.presence_key & -4294967296) = (SELECT stamp FROM life)
            THEN CASE WHEN pg_try_advisory_xact_lock_shared(1936813168,
                                   CAST(l.presence_key & 2147483647 AS INTEGER))
                      THEN CAST(1 AS BIGINT) ELSE CAST(0 AS BIGINT) END
            ELSE CAST(0 AS BIGINT) END AS gone
FROM generate_series(0, :permits - 1) AS s(slot)
JOIN "{table}" AS l ON l.lock_key = CAST(:prefix AS TEXT) || s.slot
WHERE l.locked
  AND l.expires_at > statement_timestamp()
ORDER BY s.slot
