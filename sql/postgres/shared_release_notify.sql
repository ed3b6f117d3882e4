-- shared_release, with a wake-up for waiters (LockerBuilder::notify_waiters): the same
-- owner- and token-checked release of one hold of :key (a read, a permit), and when
-- it frees the hold's row, pg_notify names that key on the table's channel, delivered
-- at commit, as lease_release_notify.sql does: a semaphore's waiters wait for any of
-- its permits (the listener wakes them by the prefix of the permit's key). The holds
-- left come back, 0 when this was the last; none when the hold was no longer ours.
WITH relaxed AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
), released AS (
    UPDATE "{table}" SET
        locked = hold_count > 1,
        expires_at = CASE WHEN hold_count > 1 THEN expires_at ELSE statement_timestamp() END,
        hold_count = greatest(hold_count - 1, 0)
    FROM relaxed
    WHERE lock_key = :key
      AND lock_owner = :owner
      AND fencing_token = :token
      AND locked
      AND expires_at - statement_timestamp() > INTERVAL '0'
    RETURNING lock_key, locked, hold_count
)
SELECT CAST(hold_count AS BIGINT),
       CASE WHEN NOT locked
            THEN pg_notify('{channel}',
                           CAST(CAST('"{table}"' AS regclass) AS oid)::TEXT || ':' || lock_key)
       END
FROM released
