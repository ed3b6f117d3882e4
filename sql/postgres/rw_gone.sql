-- Presence: the live reads of the read-write lock :key (':key@read:<owner>') of other
-- owners than the asking writer :owner whose holders are gone: each records a presence
-- marker of this server's lifetime that no session holds any more (as
-- lease_acquire.sql decides it; the shared try holds the marker only until this
-- statement ends). Asked by a writer that found the name busy; each read found is then
-- dropped by rw_drop_gone.sql, which asks again under the marker until its transaction
-- ends. The reads are a range of the rw index, as rw_read.sql finds intents.
WITH life AS MATERIALIZED (
    SELECT ((CAST(extract(epoch FROM pg_postmaster_start_time()) * 1000000 AS BIGINT)
             # COALESCE(CAST(extract(epoch FROM (SELECT stats_reset FROM pg_stat_bgwriter))
                             * 1000000 AS BIGINT), 0))
            & 4294967295) << 32 AS stamp
)
SELECT l.lock_key, l.lock_owner, l.fencing_token FROM "{table}" AS l
WHERE (strpos(l.lock_key, '@read:') > 0 OR strpos(l.lock_key, '@write:') > 0)
  AND l.lock_key COLLATE "C" >= (:key || '@read:') COLLATE "C"
  AND l.lock_key COLLATE "C" < (:key || '@read;') COLLATE "C"
  AND char_length(l.lock_key) = char_length(:key) + 42
  AND l.locked AND l.expires_at > statement_timestamp()
  AND l.hold_count > 0
  AND l.lock_owner <> :owner
  AND l.presence_key IS NOT NULL
  AND CASE WHEN (l.presence_key & -4294967296) = (SELECT stamp FROM life)
           THEN pg_try_advisory_xact_lock_shared(1936813168,
                    CAST(l.presence_key & 2147483647 AS INTEGER))
           ELSE FALSE END
