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
-- Presence: a live lock is free too when its row records a presence marker that no
-- connection holds any more, of this server and this lifetime, exactly as
-- lease_acquire.sql takes it (its holder's process died; the row is locked meanwhile,
-- so a holder that takes its marker back and renews finds the lock taken). The grant
-- handed on records the marker the waiter's place records (fair_enqueue.sql), so that
-- a grant handed to a waiter that died meanwhile is free to the next waiter at once;
-- the waiter records its current one as it takes the grant up (fair_present.sql).
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
    presence_key = (SELECT q.presence_key FROM `{table}_queue` AS q WHERE q.ticket = :ticket),
    locked = TRUE
WHERE lock_key = :key
  AND (NOT locked
       OR expires_at <= UTC_TIMESTAMP(6)
       OR (presence_key IS NOT NULL
           AND lock_owner <> :owner
           AND lock_strategy <> 'for-update'
           AND IS_USED_LOCK(presence_key) IS NULL
           AND SUBSTRING_INDEX(SUBSTRING_INDEX(presence_key, ':', 2), ':', -1)
               = CAST(@@server_id AS CHAR)
           AND acquired_at >= UTC_TIMESTAMP() + INTERVAL 1 SECOND - INTERVAL (SELECT VARIABLE_VALUE
               FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'UPTIME') SECOND))
  AND EXISTS (SELECT 1 FROM `{table}_queue` AS q
              WHERE q.ticket = :ticket
                AND q.lock_key = :key
                AND q.expires_at > UTC_TIMESTAMP(6))
