-- insert_release_at_least, with a wake-up for waiters (LockerBuilder::notify_waiters):
-- delete the row of the last hold once the at-least hold is over, and tell the
-- listeners of the table's channel that the key is free, in the same statement.
-- The payload names the table (its oid: two schemas' tables of one name share the
-- channel) and then the key; a listener ignores a payload that names another table.
-- A row with no hold left, revoked by an operator (force_release), is deleted by its
-- holder's release at once, whatever its at-least hold: that is the holder giving it
-- back, and a revoked lease never outlasts the expiry it had.
-- A row fair waiters are queued for (queued, see the migration) is not deleted: it
-- carries the flag, and is freed instead (lease_release, which the caller sends when
-- this changes nothing), for the queue to hand it on.
WITH released AS (
    DELETE FROM "{table}"
    WHERE lock_key = :key
      AND lock_owner = :owner
      AND fencing_token = :token
      AND locked
      AND NOT queued
      AND expires_at - statement_timestamp() > INTERVAL '0'
      AND (hold_count = 0
           OR (hold_count = 1 AND acquired_at + :at_least_us * INTERVAL '1 microsecond' <= statement_timestamp()))
    RETURNING lock_key
)
SELECT lock_key,
       pg_notify('{channel}', CAST(CAST('"{table}"' AS regclass) AS oid)::TEXT || ':' || lock_key)
FROM released
