-- The head of :key's queue: the live waiter with the lowest ticket that holds no
-- grant yet. Dead waiters (lapsed places) are skipped.
-- The head's place is locked until the handoff commits: a renewal of that place,
-- which takes no gate, then waits and finds the grant, and the notification names
-- the expiry the grant was given (fair_take.sql copies the place's), never a later
-- one from a renewal that slipped in between the grant and its mark. On a pooled
-- connection outside a transaction (a look before an operator's handoff) the lock
-- ends with the statement.
SELECT ticket, lock_owner
FROM "{table}_queue"
WHERE lock_key = :key
  AND granted_token IS NULL
  AND expires_at > statement_timestamp()
ORDER BY ticket
LIMIT 1
FOR UPDATE
