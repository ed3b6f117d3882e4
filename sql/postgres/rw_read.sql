-- A read hold of the read-write lock :key for :owner: the row ':key@read:<owner>', a
-- lease of its own, re-entered when this owner holds it live, and taken when
-- - the name :key itself is free, held in shared mode by reads (rw_mark.sql), or held
--   by :owner as the write side (its row records 'write', with holds: a downgrade);
--   any other hold of the name (a lock of any strategy, this owner's own included, a
--   semaphore's permits) is busy, and
-- - no other owner waits to write (a live row ':key@write:<owner>', a waiting writer's
--   intent), unless this owner holds the write side (a downgrade): readers that
--   arrive after a waiting writer wait behind it.
-- This only decides the read hold: the same transaction marks the name next
-- (rw_mark.sql), which tests the name's row again under its row lock and rolls the
-- read back unless the name is marked.
-- Sent in a transaction that holds the key's gate shared (rw_gate.sql) since before
-- this statement's snapshot: no exclusive grant of :key can commit meanwhile (they
-- take the gate exclusively).
-- The waiting writers' intents are found by a range of the rw index (migration
-- 20261127000001): it orders keys byte by byte (COLLATE "C"), which puts every
-- ':key@write:<owner>' between ':key@write:' and ':key@write;' whatever the
-- database's collation (in which the primary key's order of punctuation may not be
-- its byte order), and it is partial, so the statement repeats its predicate word for
-- word for the planner to use it. The length check leaves out the rows of other
-- names that start with ':key@write:'.
-- Tokens are drawn as lease_acquire.sql draws them. No row comes back when the read is
-- not granted; the row's hold_count tells a new hold (1) from a re-entry.
-- Presence: the read records the handle's marker :presence as lease_acquire.sql
-- records it, only while a session holds it, stamped with the server's lifetime; marked
-- says whether it did. A writer that finds the name busy drops the reads whose markers
-- are free (rw_gone.sql, rw_drop_gone.sql).
INSERT INTO "{table}" AS l
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token, presence_key)
SELECT :key || '@read:' || :owner, :owner, :strategy, TRUE, statement_timestamp(),
       statement_timestamp(), :ttl_us,
       statement_timestamp() + :ttl_us * INTERVAL '1 microsecond',
       1, nextval('"{table}_fence_seq"'),
       CASE WHEN NULLIF(:presence, '') IS NULL THEN NULL
            WHEN pg_try_advisory_xact_lock_shared(1936813168,
                                                  CAST(NULLIF(:presence, '') AS INTEGER))
            THEN NULL
            ELSE (((CAST(extract(epoch FROM pg_postmaster_start_time()) * 1000000 AS BIGINT)
                    # COALESCE(CAST(extract(epoch FROM (SELECT stats_reset FROM pg_stat_bgwriter))
                                    * 1000000 AS BIGINT), 0))
                   & 4294967295) << 32) | CAST(NULLIF(:presence, '') AS BIGINT) END
WHERE EXISTS (
        SELECT 1 FROM "{table}" AS m
        WHERE m.lock_key = :key || '@read:' || :owner
          AND m.locked AND m.expires_at > statement_timestamp()
          AND m.lock_owner = :owner AND m.hold_count > 0)
   OR (NOT EXISTS (
        SELECT 1 FROM "{table}" AS w
        WHERE w.lock_key = :key AND w.locked AND w.expires_at > statement_timestamp()
          AND NOT (w.lock_owner = '' AND w.lock_strategy = 'read')
          AND NOT (w.lock_owner = :owner AND w.lock_strategy = 'write' AND w.hold_count > 0))
       AND (EXISTS (
        SELECT 1 FROM "{table}" AS o
        WHERE o.lock_key = :key AND o.locked AND o.expires_at > statement_timestamp()
          AND o.lock_owner = :owner AND o.lock_strategy = 'write' AND o.hold_count > 0)
        OR NOT EXISTS (
        SELECT 1 FROM "{table}" AS i
        WHERE (strpos(i.lock_key, '@read:') > 0 OR strpos(i.lock_key, '@write:') > 0)
          AND i.lock_key COLLATE "C" >= (:key || '@write:') COLLATE "C"
          AND i.lock_key COLLATE "C" < (:key || '@write;') COLLATE "C"
          AND char_length(i.lock_key) = char_length(:key) + 43
          AND i.locked AND i.expires_at > statement_timestamp()
          AND i.lock_owner <> :owner)))
ON CONFLICT (lock_key) DO UPDATE SET
    fencing_token = CASE
        WHEN l.locked AND l.lock_owner = EXCLUDED.lock_owner AND l.expires_at > EXCLUDED.lock_time
        THEN l.fencing_token
        ELSE greatest(nextval('"{table}_fence_seq"'), l.fencing_token + 1) END,
    hold_count = CASE
        WHEN l.locked AND l.lock_owner = EXCLUDED.lock_owner AND l.expires_at > EXCLUDED.lock_time
        THEN l.hold_count + 1
        ELSE 1 END,
    expires_at = CASE
        WHEN l.locked AND l.lock_owner = EXCLUDED.lock_owner AND l.expires_at > EXCLUDED.lock_time
        THEN greatest(l.expires_at, EXCLUDED.expires_at)
        ELSE EXCLUDED.expires_at END,
    acquired_at = CASE
        WHEN l.locked AND l.lock_owner = EXCLUDED.lock_owner AND l.expires_at > EXCLUDED.lock_time
        THEN l.acquired_at
        ELSE EXCLUDED.acquired_at END,
    lock_owner = EXCLUDED.lock_owner,
    lock_strategy = EXCLUDED.lock_strategy,
    locked = TRUE,
    lock_time = EXCLUDED.lock_time,
    lock_duration = EXCLUDED.lock_duration,
    presence_key = EXCLUDED.presence_key
WHERE NOT l.locked
   OR l.expires_at <= EXCLUDED.lock_time
   OR (l.lock_owner = EXCLUDED.lock_owner AND l.lock_strategy = EXCLUDED.lock_strategy
       AND l.hold_count > 0)
RETURNING
    l.lock_owner,
    l.fencing_token,
    (extract(epoch FROM l.expires_at) * 1000000)::BIGINT AS expires_us,
    l.hold_count,
    l.lock_strategy,
    CAST(CASE WHEN l.presence_key IS NULL THEN 0 ELSE 1 END AS BIGINT) AS marked
