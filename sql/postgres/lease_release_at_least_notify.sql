-- lease_release_at_least, with a wake-up for waiters (LockerBuilder::notify_waiters):
-- when the release frees the key (its last hold, and the at-least hold over),
-- pg_notify tells the listeners of the table's channel, in the same statement. A key
-- the at-least hold keeps announces nothing: it lapses at its expiry, and waiters find
-- it free at their next poll. One row per matched lease: the count is the release's.
-- The last hold drops the row's presence marker, as lease_release_at_least does.
-- The payload names the table (its oid: two schemas' tables of one name share the
-- channel) and then the key; a listener ignores a payload that names another table.
-- Waits for its commit to reach disk, as lease_release_at_least does.
WITH released AS (
    UPDATE "{table}" SET
        locked = hold_count > 1
            OR acquired_at + :at_least_us * INTERVAL '1 microsecond' > statement_timestamp(),
        expires_at = CASE WHEN hold_count > 1 THEN expires_at
            ELSE greatest(statement_timestamp(),
                          acquired_at + :at_least_us * INTERVAL '1 microsecond') END,
        presence_key = CASE WHEN hold_count > 1 THEN presence_key END,
        hold_count = hold_count - 1
    WHERE lock_key = :key
      AND lock_owner = :owner
      AND fencing_token = :token
      AND locked
      AND expires_at - statement_timestamp() > INTERVAL '0'
    RETURNING lock_key, locked
)
SELECT lock_key, CASE WHEN NOT locked
    THEN pg_notify('{channel}', CAST(CAST('"{table}"' AS regclass) AS oid)::TEXT || ':' || lock_key) END
FROM released
