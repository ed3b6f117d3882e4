-- A multi-lock's attempt: every key of :keys (a JSON array of distinct keys, sorted)
-- taken as a lease for :owner, all or none, in one statement. Each key is taken as
-- lease_acquire.sql takes one (free, expired, already ours with the same strategy and
-- a hold, or a dead presence holder's of this server's lifetime), with the same token
-- rules, and records the handle's presence marker as it does: only while a session
-- holds it, stamped with the server's lifetime (life, as there); marked says whether
-- it did.
--
-- All or none, in three steps of one statement:
-- 1. the gates: every key's transaction-scoped advisory lock, tried without waiting
--    (held until the statement ends; a for-update holder or another acquisition of
--    a key keeps its gate). One closed gate: nothing is written, and one row with
--    hold_count 0 and no key answers "contended, try again".
-- 2. the check: a key held by someone else as the statement's snapshot shows it:
--    nothing is written, and no row answers "busy".
-- 3. the upsert of every key, in key order. A key granted to another owner between the
--    snapshot and the gate (so the upsert finds it taken) makes the statement take
--    fewer keys than it was given: the final SELECT then fails the statement with an
--    invalid cast (SQLSTATE 22P02), which undoes all of it; the caller tries again.
-- No step waits on a lock another acquisition holds, so two multi-locks over
-- overlapping keys never deadlock.
WITH keys AS MATERIALIZED (
    SELECT k FROM jsonb_array_elements_text(CAST(:keys AS jsonb)) AS j(k)
), gate AS MATERIALIZED (
    SELECT bool_and(pg_try_advisory_xact_lock(hashtextextended(k, hashtext('{table}'))))
           AS open
    FROM keys
), life AS MATERIALIZED (
    SELECT ((CAST(extract(epoch FROM pg_postmaster_start_time()) * 1000000 AS BIGINT)
             # COALESCE(CAST(extract(epoch FROM (SELECT stats_reset FROM pg_stat_bgwriter))
                             * 1000000 AS BIGINT), 0))
            & 4294967295) << 32 AS stamp
), busy AS MATERIALIZED (
    SELECT count(*) AS n
    FROM "{table}" AS l JOIN keys ON l.lock_key = keys.k, gate
    WHERE gate.open
      AND l.locked AND l.expires_at > statement_timestamp()
      AND NOT (l.lock_owner = :owner AND l.lock_strategy = :strategy AND l.hold_count > 0)
      AND NOT (l.presence_key IS NOT NULL
               AND l.lock_owner <> :owner
               AND l.lock_strategy <> 'for-update'
               AND CASE WHEN (l.presence_key & -4294967296) = (SELECT stamp FROM life)
                        THEN pg_try_advisory_xact_lock_shared(1936813168,
                                 CAST(l.presence_key & 2147483647 AS INTEGER))
                        ELSE FALSE END)
), taken AS (
INSERT INTO "{table}" AS l
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token, presence_key)
SELECT keys.k, :owner, :strategy, TRUE, statement_timestamp(), statement_timestamp(), :ttl_us,
       statement_timestamp() + :ttl_us * INTERVAL '1 microsecond',
       1, nextval('"{table}_fence_seq"'),
       CASE WHEN NULLIF(:presence, '') IS NULL THEN NULL
            WHEN pg_try_advisory_xact_lock_shared(1936813168,
                                                  CAST(NULLIF(:presence, '') AS INTEGER))
            THEN NULL
            ELSE life.stamp | CAST(NULLIF(:presence, '') AS BIGINT) END
FROM keys, gate, busy, life
WHERE gate.open AND busy.n = 0
ORDER BY keys.k
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
   OR (l.presence_key IS NOT NULL
       AND l.lock_owner <> EXCLUDED.lock_owner
       AND l.lock_strategy <> 'for-update'
       AND CASE WHEN (l.presence_key & -4294967296) = (SELECT stamp FROM life)
                THEN pg_try_advisory_xact_lock_shared(1936813168,
                                               CAST(l.presence_key & 2147483647 AS INTEGER))
                ELSE FALSE END)
RETURNING
    l.lock_key,
    l.lock_owner,
    l.fencing_token,
    (extract(epoch FROM l.expires_at) * 1000000)::BIGINT AS expires_us,
    l.hold_count,
    l.lock_strategy,
    CAST(CASE WHEN l.presence_key IS NULL THEN 0 ELSE 1 END AS BIGINT) AS marked
)
SELECT lock_key, lock_owner, fencing_token, expires_us,
       hold_count + CAST(CASE WHEN (SELECT count(*) FROM taken) = (SELECT count(*) FROM keys)
                              THEN '0' ELSE 'sqlock: a multi-lock took only part of its keys'
                         END AS INTEGER) AS hold_count,
       lock_strategy,
       marked
FROM taken
UNION ALL
SELECT '', '', 0, 0, 0, '', 0 FROM gate WHERE NOT gate.open
