-- A multi-lock's attempt: every key of :keys (a JSON array of distinct keys, sorted)
-- taken as a lease for :owner, all or none, in one statement. Each key is taken as
-- lease_acquire.sql takes one (free, expired, already ours with the same strategy and
-- a hold, or a dead presence holder's of this server's lifetime), with the same token
-- rules and the same order of assignments (see there for why each comes where it
-- does), and records the handle's presence marker as it does: only while a
-- connection holds it; marked says whether it did.
--
-- All or none:
-- - The keys' fence buckets are locked first (FOR UPDATE), as a single acquisition
--   locks its key's, and the keys' rows are read with locks too (INSERT ... SELECT
--   reads its source rows locked), each by its primary key from the array of keys
--   (STRAIGHT_JOIN, FORCE INDEX), never by a scan that would lock other keys' rows or
--   wait on them (a for-update holder of another key keeps its row locked for its
--   whole transaction; see lease_renew.sql), all without waiting: with a lock wait timeout of
--   zero, one bucket or row that another transaction holds (an acquisition of a key in
--   the same bucket, a for-update holder) fails the whole statement at once with
--   ER_LOCK_WAIT_TIMEOUT, which writes nothing and counts as contention: tried again.
--   No bucket is skipped, so no key can drop out of the statement unnoticed; a Galera
--   node is sent this same statement.
-- - A key held by someone else, as those locked reads find it, makes the SELECT yield
--   no row at all: nothing is written and no row comes back, "busy".
-- - Otherwise every key is inserted or taken over. The rows cannot have changed since
--   the check (they are locked), so every update below takes its row; should one ever
--   find its row not to take, its hold count is assigned a value out of range, which
--   fails the statement (ER_DATA_OUT_OF_RANGE, under any sql_mode) and undoes all of
--   it rather than leave part of the set taken: contention, tried again.
-- No statement waits on a lock another acquisition holds, so two multi-locks over
-- overlapping keys never wait for each other in a cycle.
SET STATEMENT innodb_lock_wait_timeout = 0 FOR
INSERT INTO `{table}`
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token, presence_key)
SELECT k.k, :owner, :strategy, TRUE, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), :ttl_us,
       UTC_TIMESTAMP(6) + INTERVAL :ttl_us MICROSECOND,
       1, NEXTVAL(`{table}_fence_seq`),
       IF(IS_USED_LOCK(NULLIF(:presence, '')) IS NULL, NULL, :presence)
FROM JSON_TABLE(:keys, '$[*]' COLUMNS (
         k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$')) AS k
    STRAIGHT_JOIN `{table}_fence` AS f ON f.bucket = CRC32(k.k) % 1024
WHERE NOT EXISTS (
        SELECT 1
        FROM JSON_TABLE(:keys, '$[*]' COLUMNS (
                 k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin
                 PATH '$')) AS j
            STRAIGHT_JOIN `{table}` AS b FORCE INDEX (PRIMARY) ON b.lock_key = j.k
        WHERE b.locked AND b.expires_at > UTC_TIMESTAMP(6)
          AND NOT (b.lock_owner = :owner AND b.lock_strategy = :strategy
                   AND b.hold_count > 0)
          AND NOT (b.presence_key IS NOT NULL AND b.lock_owner <> :owner
                   AND b.lock_strategy <> 'for-update'
                   AND IS_USED_LOCK(b.presence_key) IS NULL
                   AND SUBSTRING_INDEX(SUBSTRING_INDEX(b.presence_key, ':', 2), ':', -1)
                       = CAST(@@server_id AS CHAR)
                   AND b.acquired_at >= UTC_TIMESTAMP() + INTERVAL 1 SECOND - INTERVAL (SELECT VARIABLE_VALUE
                       FROM information_schema.SESSION_STATUS
                       WHERE VARIABLE_NAME = 'UPTIME') SECOND))
ORDER BY k.k
FOR UPDATE
ON DUPLICATE KEY UPDATE
    fencing_token = IF((@sqlock_gone := (presence_key IS NOT NULL
            AND lock_owner <> VALUES(lock_owner) AND lock_strategy <> 'for-update'
            AND IS_USED_LOCK(presence_key) IS NULL
            AND SUBSTRING_INDEX(SUBSTRING_INDEX(presence_key, ':', 2), ':', -1)
                = CAST(@@server_id AS CHAR)
            AND acquired_at >= UTC_TIMESTAMP() + INTERVAL 1 SECOND - INTERVAL (SELECT VARIABLE_VALUE
                FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'UPTIME') SECOND))
        OR NOT locked OR expires_at <= VALUES(lock_time)
        OR (lock_owner = VALUES(lock_owner) AND lock_strategy = VALUES(lock_strategy)
            AND hold_count > 0),
                       IF(locked AND lock_owner = VALUES(lock_owner) AND expires_at > VALUES(lock_time),
                          fencing_token, GREATEST(NEXTVAL(`{table}_fence_seq`), fencing_token + 1)),
                       fencing_token),
    hold_count = IF(@sqlock_gone OR NOT locked OR expires_at <= VALUES(lock_time)
        OR (lock_owner = VALUES(lock_owner) AND lock_strategy = VALUES(lock_strategy)
            AND hold_count > 0),
                    IF(locked AND lock_owner = VALUES(lock_owner) AND expires_at > VALUES(lock_time),
                       hold_count + 1, 1),
                    -- Not to take: the statement fails here (see above).
                    CAST(~0 AS UNSIGNED) + (hold_count >= 0)),
    lock_time = IF(@sqlock_gone OR NOT locked OR expires_at <= VALUES(lock_time)
        OR (lock_owner = VALUES(lock_owner) AND lock_strategy = VALUES(lock_strategy)
            AND hold_count > 0),
                   VALUES(lock_time), lock_time),
    lock_duration = IF(@sqlock_gone OR NOT locked OR expires_at <= VALUES(lock_time)
        OR (lock_owner = VALUES(lock_owner) AND lock_strategy = VALUES(lock_strategy)
            AND hold_count > 0),
                       VALUES(lock_duration), lock_duration),
    lock_strategy = IF(@sqlock_gone OR NOT locked OR expires_at <= VALUES(lock_time)
        OR (lock_owner = VALUES(lock_owner) AND lock_strategy = VALUES(lock_strategy)
            AND hold_count > 0),
                       VALUES(lock_strategy), lock_strategy),
    lock_owner = IF(@sqlock_gone OR NOT locked OR expires_at <= VALUES(lock_time)
        OR (lock_owner = VALUES(lock_owner) AND lock_strategy = VALUES(lock_strategy)
            AND hold_count > 0),
                    VALUES(lock_owner), lock_owner),
    presence_key = IF(lock_owner = VALUES(lock_owner) AND lock_strategy = VALUES(lock_strategy)
                      AND hold_count > 0,
                      VALUES(presence_key), presence_key),
    expires_at = IF(lock_owner = VALUES(lock_owner) AND lock_strategy = VALUES(lock_strategy)
                      AND hold_count > 0,
                    IF(hold_count > 1, GREATEST(expires_at, VALUES(expires_at)), VALUES(expires_at)),
                    expires_at),
    acquired_at = IF(lock_owner = VALUES(lock_owner) AND lock_strategy = VALUES(lock_strategy)
                      AND hold_count > 0,
                     IF(hold_count > 1, acquired_at, VALUES(acquired_at)),
                     acquired_at),
    locked = IF(lock_owner = VALUES(lock_owner) AND lock_strategy = VALUES(lock_strategy)
                      AND hold_count > 0, TRUE, locked)
RETURNING
    lock_key,
    lock_owner,
    fencing_token,
    TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', expires_at) AS expires_us,
    hold_count,
    lock_strategy,
    CAST(presence_key IS NOT NULL AS SIGNED) AS marked
