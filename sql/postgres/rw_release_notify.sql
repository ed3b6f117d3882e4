-- rw_release, with a wake-up for waiters (LockerBuilder::notify_waiters): the same
-- release of the write side, and when it frees the name (its last hold, and no read of
-- its owner to leave the name to), pg_notify tells the listeners of the table's
-- channel which key is free, in the same statement, delivered at commit, as
-- lease_release_notify.sql does. A name left to the read stays held: no wake-up. One
-- row per release.
WITH relaxed AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
), r AS MATERIALIZED (
    SELECT expires_at FROM "{table}"
    WHERE lock_key = :key || '@read:' || :owner
      AND lock_owner = :owner
      AND locked
      AND hold_count > 0
      AND expires_at > statement_timestamp()
    FOR SHARE
), d AS MATERIALIZED (
    SELECT (SELECT max(expires_at) FROM r) AS read_until, relaxed.setting FROM relaxed
), released AS (
    UPDATE "{table}" AS n SET
        locked = n.hold_count > 1 OR d.read_until IS NOT NULL,
        lock_owner = CASE WHEN n.hold_count > 1 OR d.read_until IS NULL THEN n.lock_owner
                          ELSE '' END,
        lock_strategy = CASE WHEN n.hold_count > 1 OR d.read_until IS NULL
                             THEN n.lock_strategy ELSE 'read' END,
        acquired_at = CASE WHEN n.hold_count > 1 OR d.read_until IS NULL THEN n.acquired_at
                           ELSE statement_timestamp() END,
        lock_time = CASE WHEN n.hold_count > 1 OR d.read_until IS NULL THEN n.lock_time
                         ELSE statement_timestamp() END,
        lock_duration = CASE WHEN n.hold_count > 1 OR d.read_until IS NULL
            THEN n.lock_duration
            ELSE (extract(epoch FROM d.read_until - statement_timestamp()) * 1000000)::BIGINT
            END,
        expires_at = CASE WHEN n.hold_count > 1 THEN n.expires_at
                          WHEN d.read_until IS NULL THEN statement_timestamp()
                          ELSE d.read_until END,
        presence_key = CASE WHEN n.hold_count > 1 OR d.read_until IS NULL
                            THEN n.presence_key ELSE NULL END,
        hold_count = CASE WHEN n.hold_count > 1 THEN n.hold_count - 1
                          WHEN d.read_until IS NULL THEN 0
                          ELSE 1 END
    FROM d
    WHERE n.lock_key = :key
      AND n.lock_owner = :owner
      AND n.fencing_token = :token
      AND n.lock_strategy = 'write'
      AND n.locked
      AND n.expires_at - statement_timestamp() > INTERVAL '0'
    RETURNING n.lock_key, n.locked
)
SELECT lock_key, CASE WHEN NOT locked
    THEN pg_notify('{channel}', CAST(CAST('"{table}"' AS regclass) AS oid)::TEXT || ':' || lock_key) END
FROM released
