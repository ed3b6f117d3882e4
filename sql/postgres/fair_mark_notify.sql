-- fair_mark, with a wake-up (LockerBuilder::notify_waiters): records in the waiter's
-- place the grant handed to it and names the waiter, by ticket, with the grant's
-- token and the grant's expiry (microseconds since the epoch: the place's, which the
-- grant lasts until it is taken up), on the table's grant channel, in the same
-- statement. PostgreSQL delivers the notification at the handoff's commit, when the
-- grant is there to take up; only that waiter is woken, and it takes the grant as
-- the payload describes it, without a statement on its way (fair_claim.sql's work,
-- when it keeps no renewal going, is done first then).
WITH marked AS (
    UPDATE "{table}_queue" SET granted_token = :token
    WHERE ticket = :ticket
      AND lock_key = :key
    RETURNING ticket, granted_token, expires_at
)
SELECT pg_notify('{grant_channel}', CAST(ticket AS TEXT) || ':' || CAST(granted_token AS TEXT)
       || ':' || CAST((extract(epoch FROM expires_at) * 1000000)::BIGINT AS TEXT))
FROM marked
