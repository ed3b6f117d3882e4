-- fair_mark, with a wake-up (LockerBuilder::notify_waiters): records in the waiter's
-- place the grant handed to it and names the waiter, by ticket, with the grant's
-- token, on the table's grant channel, in the same statement. PostgreSQL delivers the
-- notification at the handoff's commit, when the grant is there to take up; only
-- that waiter is woken, and it takes the grant up without reading its place first.
WITH marked AS (
    UPDATE "{table}_queue" SET granted_token = :token
    WHERE ticket = :ticket
      AND lock_key = :key
    RETURNING ticket, granted_token
)
SELECT pg_notify('{grant_channel}', CAST(ticket AS TEXT) || ':' || CAST(granted_token AS TEXT))
FROM marked
