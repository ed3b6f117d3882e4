-- A waiter of :key joins the queue: its ticket orders it among the waiters, and its
-- place lasts :ttl_us unless renewed.
-- Presence: :presence is the key of the waiter's presence marker ('' for none),
-- recorded on its place as lease_acquire.sql records it on a lease (only while a
-- session holds it, with the stamp of this server's lifetime); a handoff copies it
-- onto the grant it hands the waiter (fair_take.sql), so that a grant handed to a
-- waiter whose process died is taken on at once.
WITH life AS MATERIALIZED (
    SELECT ((CAST(extract(epoch FROM pg_postmaster_start_time()) * 1000000 AS BIGINT)
             # COALESCE(CAST(extract(epoch FROM (SELECT stats_reset FROM pg_stat_bgwriter))
                             * 1000000 AS BIGINT), 0))
            & 4294967295) << 32 AS stamp
)
INSERT INTO "{table}_queue" (lock_key, lock_owner, expires_at, presence_key)
SELECT :key, :owner, statement_timestamp() + :ttl_us * INTERVAL '1 microsecond',
       CASE WHEN NULLIF(:presence, '') IS NULL THEN NULL
            WHEN pg_try_advisory_xact_lock_shared(1936813168,
                                                  CAST(NULLIF(:presence, '') AS INTEGER))
            THEN NULL
            ELSE life.stamp | CAST(NULLIF(:presence, '') AS BIGINT) END
FROM life
RETURNING ticket
