-- Hand :key to the waiter :ticket (owner :owner) when the lock is free or expired: a
-- new grant with a new fencing token (back through LAST_INSERT_ID(expr)), lasting as
-- long as the waiter's place does (the waiter pushes it to its TTL when it takes the
-- grant up), so a grant handed to a waiter that died meanwhile lapses with its place.
-- No row matches when the lock is held. The condition is read before any assignment;
-- the assignments run left to right, so lock_duration reads the new expiry.
-- No wait on a row lock: a for-update holder keeps the key's row locked for its whole
-- transaction; a locked row fails the statement at once (the lock is held: nothing to
-- hand over). The waiter's place, which the subqueries read, is locked by this step
-- already (fair_head.sql), so a lock met here is the key's row's.
SET STATEMENT innodb_lock_wait_timeout = 0 FOR
UPDATE `{table}` SET
    fencing_token = LAST_INSERT_ID(GREATEST(NEXTVAL(`{table}_fence_seq`), fencing_token + 1)),
    lock_owner = :owner,
    lock_strategy = 'fair',
    acquired_at = UTC_TIMESTAMP(6),
    lock_time = UTC_TIMESTAMP(6),
    expires_at = (SELECT q.expires_at FROM `{table}_queue` AS q WHERE q.ticket = :ticket),
    lock_duration = TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at),
    hold_count = 1,
    presence_key = NULL,
    locked = TRUE
WHERE lock_key = :key
  AND (NOT locked OR expires_at <= UTC_TIMESTAMP(6))
  AND EXISTS (SELECT 1 FROM `{table}_queue` AS q
              WHERE q.ticket = :ticket
                AND q.lock_key = :key
                AND q.expires_at > UTC_TIMESTAMP(6))
