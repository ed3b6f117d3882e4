-- lease_release_at_least, with a wake-up for waiters (LockerBuilder::notify_waiters):
-- when the release frees the key (its last hold, and the at-least hold over),
-- pg_notify tells the listeners of the table's channel, in the same statement. A key
-- the at-least hold keeps announces nothing: it lapses at its expiry, and waiters find
-- it free at their next poll. One row per matched lease: the count is the release's.
-- The last hold drops the row's presence marker, as lease_release_at_least does.
-- The payload names the table (its oid: two schemas' tables of one name share the
-- channel) and then the key; a listener ignores a payload that names another table.
-- Waits for its commit to reach disk, as lease_release_at_least does.
-- A lease with no hold left, revoked by an operator (force_release), is freed at
-- once by its holder's release, whatever its at-least hold: that is the holder giving
-- it back, and a revoked lease never outlasts the expiry it had. The count never goes
-- below 0.
WITH released AS (
    UPDATE "{table}" SET
        locked = hold_count > 1
            OR (hold_count = 1
                AND acquired_at + :at_least_us * INTERVAL '1 microsecond' > statement_timestamp()),
        expires_at = CASE WHEN hold_count > 1 THEN expires_at
            WHEN hold_count = 0 THEN statement_timestamp()
            ELSE greatest(statement_timestamp(),
                          acquired_at + :at_least_us * INTERVAL '1 microsecond') END,
        presence_key = CASE WHEN hold_count > 1 THEN presence_key END,
        hold_count = greatest(hold_count - 1, 0)
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
