-- fair_mark, with a wake-up (LockerBuilder::notify_waiters): records in the waiter's
-- place the grant handed to it and names the waiter on the table's grant channel, in
-- the same statement. PostgreSQL delivers the notification at the handoff's commit,
-- when the grant is there to take up; only that waiter is woken.
-- The payload is `<table oid>:<ticket>:<token>:<key>`: the table (two schemas' tables
-- of one name share the channel, and number their tickets alike), the waiter's ticket,
-- the grant's fencing token, the key. It is a hint, never a grant: the waiter it names
-- holds only once its own owner- and token-checked statement (lease_extend) found the
-- grant in the table, and a listener ignores a payload that names another table.
WITH marked AS (
    UPDATE "{table}_queue" SET granted_token = :token
    WHERE ticket = :ticket
      AND lock_key = :key
    RETURNING ticket, granted_token, lock_key
)
SELECT pg_notify('{grant_channel}',
                 CAST(CAST('"{table}"' AS regclass) AS oid)::TEXT || ':' || CAST(ticket AS TEXT)
                 || ':' || CAST(granted_token AS TEXT) || ':' || lock_key)
FROM marked
