-- A read's mark of the read-write lock's name :key, in the read's transaction, right
-- after the read hold was granted (rw_read.sql): the name's own row is held in shared
-- mode by reads, so that every other acquisition of the name, of any primitive, finds
-- it held by another owner and busy. In shared mode the row has no owner (''),
-- lock_strategy 'read', counts the read holds in hold_count, and expires no sooner
-- than any of them:
-- - free, missing or expired: taken in shared mode, one hold, a new fencing token;
-- - held by reads: :count more holds (1 for a new read hold, 0 for a re-entry), its
--   expiry pushed to at least :ttl_us from now, and no sooner than the read hold's
--   (read from its row: the hold's statement read the clock a moment before, and a
--   clock stepped back between the two must not leave the name short of the hold);
-- - held by :owner as the write side (recorded 'write', with holds: a downgrade):
--   left so, its expiry pushed as well, and its presence marker dropped, so that no
--   presence takeover frees the name while the read lives (the write's release leaves
--   the name to the read, rw_release.sql);
-- - anything else (a lock of any owner, this one's included; a semaphore's
--   permits): left as it is.
-- Sent under the key's fence bucket, held shared (rw_gate.sql): no exclusive grant of
-- the name commits meanwhile, and a fresh row's token is drawn after every earlier
-- grant of the name committed. No wait on a row lock: the name's row locked by another
-- transaction (a for-update holder, another read's mark) fails the statement at once
-- (contention, tried again).
-- MariaDB assigns from left to right, each assignment seeing those before it: whether
-- the row is taken afresh (@sqlock_fresh) and whether it is marked at all
-- (@sqlock_ok) are decided first, from the row as it was, and kept for the others.
-- RETURNING shows the row as it stands afterwards: 1 when the name is marked (held in
-- shared mode by reads, or by :owner's write side), 0 otherwise, and the caller rolls
-- the read back (busy).
SET STATEMENT innodb_lock_wait_timeout = 0 FOR
INSERT INTO `{table}`
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token, presence_key)
SELECT :key, '', 'read', TRUE, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), :ttl_us,
       GREATEST(UTC_TIMESTAMP(6) + INTERVAL :ttl_us MICROSECOND,
                COALESCE((SELECT h.expires_at FROM `{table}` AS h
                          WHERE h.lock_key = CONCAT(:key, '@read:', :owner)),
                         UTC_TIMESTAMP(6))),
       1, NEXTVAL(`{table}_fence_seq`), NULL
FROM DUAL
ON DUPLICATE KEY UPDATE
    fencing_token = IF((@sqlock_fresh := (NOT locked OR expires_at <= VALUES(lock_time))),
                       GREATEST(NEXTVAL(`{table}_fence_seq`), fencing_token + 1),
                       fencing_token),
    lock_time = IF((@sqlock_ok := (@sqlock_fresh
                        OR (lock_owner = '' AND lock_strategy = 'read')
                        OR (lock_owner = :owner AND lock_strategy = 'write' AND hold_count > 0))),
                   VALUES(lock_time), lock_time),
    hold_count = IF(@sqlock_fresh, 1,
                    IF(@sqlock_ok AND lock_owner = '', hold_count + :count, hold_count)),
    acquired_at = IF(@sqlock_fresh, VALUES(acquired_at), acquired_at),
    expires_at = IF(@sqlock_fresh, VALUES(expires_at),
                    IF(@sqlock_ok, GREATEST(expires_at, VALUES(expires_at)), expires_at)),
    lock_duration = IF(@sqlock_ok,
                       TIMESTAMPDIFF(MICROSECOND, VALUES(lock_time), expires_at), lock_duration),
    presence_key = IF(@sqlock_ok, NULL, presence_key),
    lock_strategy = IF(@sqlock_fresh, 'read', lock_strategy),
    lock_owner = IF(@sqlock_fresh, '', lock_owner),
    locked = IF(@sqlock_ok, TRUE, locked)
RETURNING CAST(locked AND expires_at > UTC_TIMESTAMP(6)
               AND ((lock_owner = '' AND lock_strategy = 'read')
                    OR (lock_owner = :owner AND lock_strategy = 'write' AND hold_count > 0))
               AS SIGNED) AS marked
