-- Takes up to :count free permits of a semaphore of :permits slots for :owner, in one
-- statement, under the semaphore's gate (semaphore_gate.sql, earlier in the same
-- transaction): each slot is a lease on the key CONCAT(:prefix, slot), slot 0 to
-- :permits - 1, taken when its row is missing, free or expired, as lease_acquire
-- takes a free key. The caller counts the rows marked taken and rolls the
-- transaction back unless all it asked for were: k permits at once or none. Slots
-- only, never a re-entry: a slot of :owner's that is still live is not a candidate.
--
-- RETURNING shows every candidate row as it stands afterwards; `taken` tells those
-- this statement took (their owner ours, taken at this statement's time, which
-- UTC_TIMESTAMP(6) keeps for the whole statement). A candidate is free at the
-- statement's time, and stays so under the gate, so all are taken; the take condition
-- is tested again all the same, once, in the first assignment, and kept in
-- @sqlock_free for the others (MariaDB assigns from left to right, each assignment
-- seeing the ones before it). The token is drawn under the row lock from the table's
-- sequence, so tokens rise in grant order, across the slots of a semaphore too.
-- A row another transaction keeps locked (an operator's release, a renewal) is
-- waited on for a second at most, then contention: tried again.
--
-- Presence, as lease_acquire.sql has it: a permit records the handle's marker :presence
-- only while a connection holds it (marked says whether it did); and a live permit of
-- another owner whose row records a marker of this server's lifetime that no
-- connection holds any more is free: its holder died. The row is locked meanwhile, so
-- a holder that takes its marker back and renews finds the permit taken. The dead
-- holder's hold of the semaphore's name stays counted (the name's mark counts this
-- grant's permits as new holds): the name then outlives its holds until its expiry,
-- which costs a later holder of the name itself time, never safety.
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
INSERT INTO `{table}`
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token, presence_key)
SELECT f.lock_key, :owner, 'lease', TRUE, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), :ttl_us,
       UTC_TIMESTAMP(6) + INTERVAL :ttl_us MICROSECOND, 1, NEXTVAL(`{table}_fence_seq`),
       IF(IS_USED_LOCK(NULLIF(:presence, '')) IS NULL, NULL, :presence)
FROM (
    WITH RECURSIVE seq (slot) AS (
        SELECT 0 UNION ALL SELECT slot + 1 FROM seq WHERE slot + 1 < :permits
    )
    SELECT CONCAT(:prefix, seq.slot) AS lock_key
    FROM seq
    LEFT JOIN `{table}` AS o ON o.lock_key = CONCAT(:prefix, seq.slot)
    WHERE o.lock_key IS NULL OR NOT o.locked OR o.expires_at <= UTC_TIMESTAMP(6)
       OR (o.presence_key IS NOT NULL
           AND o.lock_owner <> :owner
           AND o.lock_strategy <> 'for-update'
           AND IS_USED_LOCK(o.presence_key) IS NULL
           AND SUBSTRING_INDEX(SUBSTRING_INDEX(o.presence_key, ':', 2), ':', -1)
               = CAST(@@server_id AS CHAR)
           AND o.acquired_at >= UTC_TIMESTAMP() + INTERVAL 1 SECOND - INTERVAL (SELECT VARIABLE_VALUE
               FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'UPTIME') SECOND)
    ORDER BY seq.slot
    LIMIT :count
) AS f
ON DUPLICATE KEY UPDATE
    fencing_token = IF((@sqlock_free := (NOT locked OR expires_at <= VALUES(lock_time)
            OR (presence_key IS NOT NULL
                AND lock_owner <> VALUES(lock_owner) AND lock_strategy <> 'for-update'
                AND IS_USED_LOCK(presence_key) IS NULL
                AND SUBSTRING_INDEX(SUBSTRING_INDEX(presence_key, ':', 2), ':', -1)
                    = CAST(@@server_id AS CHAR)
                AND acquired_at >= UTC_TIMESTAMP() + INTERVAL 1 SECOND - INTERVAL (SELECT VARIABLE_VALUE
                    FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'UPTIME') SECOND))),
                       GREATEST(NEXTVAL(`{table}_fence_seq`), fencing_token + 1),
                       fencing_token),
    lock_owner = IF(@sqlock_free, VALUES(lock_owner), lock_owner),
    lock_strategy = IF(@sqlock_free, VALUES(lock_strategy), lock_strategy),
    acquired_at = IF(@sqlock_free, VALUES(acquired_at), acquired_at),
    lock_time = IF(@sqlock_free, VALUES(lock_time), lock_time),
    lock_duration = IF(@sqlock_free, VALUES(lock_duration), lock_duration),
    hold_count = IF(@sqlock_free, 1, hold_count),
    presence_key = IF(@sqlock_free, VALUES(presence_key), presence_key),
    expires_at = IF(@sqlock_free, VALUES(expires_at), expires_at),
    locked = IF(@sqlock_free, TRUE, locked)
RETURNING
    lock_key,
    fencing_token,
    TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', expires_at) AS expires_us,
    CAST(IF(lock_owner = :owner AND locked AND lock_time = UTC_TIMESTAMP(6), 1, 0) AS SIGNED) AS taken,
    CAST(presence_key IS NOT NULL AS SIGNED) AS marked
