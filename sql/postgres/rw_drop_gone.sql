-- Presence: a gone reader's read :key, dropped by a writer that found it (rw_gone.sql)
-- when it is still that reader's hold (:owner, :token) and its marker still free: the
-- shared try keeps the marker until the transaction commits, so the reader cannot take
-- it back meanwhile (a reader that takes it back afterwards finds its read gone, and
-- its lost signal fires). Its token moves on, as an operator's drop moves it
-- (shared_drop.sql), and the same transaction counts the name one hold less
-- (shared_leave.sql). One row when the read was dropped.
WITH life AS MATERIALIZED (
    SELECT ((CAST(extract(epoch FROM pg_postmaster_start_time()) * 1000000 AS BIGINT)
             # COALESCE(CAST(extract(epoch FROM (SELECT stats_reset FROM pg_stat_bgwriter))
                             * 1000000 AS BIGINT), 0))
            & 4294967295) << 32 AS stamp
)
UPDATE "{table}" SET
    locked = FALSE,
    hold_count = 0,
    expires_at = statement_timestamp(),
    fencing_token = greatest(nextval('"{table}_fence_seq"'), fencing_token + 1)
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND hold_count > 0
  AND expires_at > statement_timestamp()
  AND presence_key IS NOT NULL
  AND CASE WHEN (presence_key & -4294967296) = (SELECT stamp FROM life)
           THEN pg_try_advisory_xact_lock_shared(1936813168,
                    CAST(presence_key & 2147483647 AS INTEGER))
           ELSE FALSE END
