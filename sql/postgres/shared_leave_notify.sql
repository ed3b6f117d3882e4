-- shared_leave, with a wake-up for waiters (LockerBuilder::notify_waiters): when the
-- name counts no hold any more and is free, pg_notify tells the listeners of the
-- table's channel, delivered at commit, as lease_release_notify.sql does. One row per
-- name counted down.
WITH left_ AS (
    UPDATE "{table}" SET
        locked = hold_count > 1,
        expires_at = CASE WHEN hold_count > 1 THEN expires_at ELSE statement_timestamp() END,
        hold_count = hold_count - 1
    WHERE lock_key = :key
      AND lock_owner = ''
      AND lock_strategy = :strategy
      AND locked
      AND hold_count > 0
      AND expires_at - statement_timestamp() > INTERVAL '0'
    RETURNING lock_key, locked
)
SELECT lock_key,
       CASE WHEN NOT locked
            THEN pg_notify('{channel}',
                           CAST(CAST('"{table}"' AS regclass) AS oid)::TEXT || ':' || lock_key)
       END
FROM left_
