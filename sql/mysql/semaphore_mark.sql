-- A semaphore's mark of its name :key, last in an acquisition's transaction, once its
-- :count permits were taken (semaphore_take.sql): the name's own row is held in shared
-- mode by permits, so that every other acquisition of the name, of any primitive,
-- finds it held by another owner and busy. In shared mode the row has no owner (''),
-- lock_strategy 'semaphore', counts the permits held in hold_count, and expires no
-- sooner than any of them:
-- - free, missing or expired: taken in shared mode, :count holds, a new fencing token;
-- - held by permits: :count more holds, its expiry pushed to at least :ttl_us from now,
--   and no sooner than any live permit of :owner's (read from their rows: the permits
--   taken in this transaction read the clock a moment before, and a clock stepped
--   back between the two must not leave the name short of them);
-- - anything else (a lock of any strategy, reads of a read-write lock): left as it is.
-- The key's fence bucket is locked first and kept to the transaction's end, as every
-- acquisition of the name locks it (a read keeps it shared for its transaction): a
-- fresh row's token is drawn after every earlier grant of the name committed. No wait
-- on a lock: a bucket or a row another transaction holds (a read of the name, a
-- for-update holder) fails the statement at once (contention: the caller rolls back
-- and tries again).
-- MariaDB assigns from left to right, each assignment seeing those before it: whether
-- the row is taken afresh (@sqlock_fresh) and whether it is marked at all
-- (@sqlock_ok) are decided first, from the row as it was, and kept for the others.
-- RETURNING shows the row as it stands afterwards: 1 when the name is marked, 0
-- otherwise (busy).
SET STATEMENT innodb_lock_wait_timeout = 0 FOR
INSERT INTO `{table}`
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token, presence_key)
SELECT :key, '', 'semaphore', TRUE, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), :ttl_us,
       GREATEST(UTC_TIMESTAMP(6) + INTERVAL :ttl_us MICROSECOND,
                COALESCE((SELECT MAX(l.expires_at) FROM (
                              WITH RECURSIVE seq (slot) AS (
                                  SELECT 0 UNION ALL SELECT slot + 1 FROM seq WHERE slot + 1 < 1000
                              )
                              SELECT CONCAT('semaphore:', m.name, '#', seq.slot) AS k
                              FROM `{table}_semaphores` AS m JOIN seq ON seq.slot < m.permits
                              WHERE m.name = :key) AS s
                          JOIN `{table}` AS l ON l.lock_key = s.k
                          WHERE l.lock_owner = :owner AND l.locked),
                         UTC_TIMESTAMP(6))),
       :count, NEXTVAL(`{table}_fence_seq`), NULL
FROM `{table}_fence`
WHERE bucket = CRC32(:key) % 1024
FOR UPDATE
ON DUPLICATE KEY UPDATE
    fencing_token = IF((@sqlock_fresh := (NOT locked OR expires_at <= VALUES(lock_time))),
                       GREATEST(NEXTVAL(`{table}_fence_seq`), fencing_token + 1),
                       fencing_token),
    lock_time = IF((@sqlock_ok := (@sqlock_fresh
                        OR (lock_owner = '' AND lock_strategy = 'semaphore'))),
                   VALUES(lock_time), lock_time),
    hold_count = IF(@sqlock_fresh, VALUES(hold_count),
                    IF(@sqlock_ok, hold_count + VALUES(hold_count), hold_count)),
    acquired_at = IF(@sqlock_fresh, VALUES(acquired_at), acquired_at),
    expires_at = IF(@sqlock_fresh, VALUES(expires_at),
                    IF(@sqlock_ok, GREATEST(expires_at, VALUES(expires_at)), expires_at)),
    lock_duration = IF(@sqlock_ok,
                       TIMESTAMPDIFF(MICROSECOND, VALUES(lock_time), expires_at), lock_duration),
    presence_key = IF(@sqlock_ok, NULL, presence_key),
    lock_strategy = IF(@sqlock_fresh, 'semaphore', lock_strategy),
    lock_owner = IF(@sqlock_fresh, '', lock_owner),
    locked = IF(@sqlock_ok, TRUE, locked)
RETURNING CAST(locked AND expires_at > UTC_TIMESTAMP(6)
               AND lock_owner = '' AND lock_strategy = 'semaphore' AS SIGNED) AS marked
