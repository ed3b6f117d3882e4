-- The head of :key's queue: the live waiter with the lowest ticket that holds no
-- grant yet. Dead waiters (lapsed places) are skipped.
-- The places read are locked until the step ends, so that fair_take and fair_mark find
-- the head's place as it was read, locked already: a waiter renewing its place (which
-- takes no gate) holds that row for its one statement, and is waited for, a second at
-- most. A place still locked then fails this statement (1205), and the whole step is
-- rolled back and tried again: a busy head is contention, never "nobody to hand the
-- lock to", which would free the lock with a waiter queued.
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
SELECT ticket, lock_owner
FROM `{table}_queue`
WHERE lock_key = :key
  AND granted_token IS NULL
  AND expires_at > UTC_TIMESTAMP(6)
ORDER BY ticket
LIMIT 1
FOR UPDATE
