-- A read hold of the read-write lock :key for :owner: the row ':key@read:<owner>', a
-- lease of its own, re-entered when this owner holds it live, and taken when
-- - the name :key itself is free, held in shared mode by reads (rw_mark.sql), or held
--   by :owner as the write side (its row records 'write', with holds: a downgrade);
--   any other hold of the name (a lock of any strategy, this owner's own included, a
--   semaphore's permits) is busy, and
-- - no other owner waits to write (a live row ':key@write:<owner>', a waiting writer's
--   intent), unless this owner holds the write side (a downgrade): readers that
--   arrive after a waiting writer wait behind it.
-- This only decides the read hold: the same transaction marks the name next
-- (rw_mark.sql), which tests the name's row again under its row lock and rolls the
-- read back unless the name is marked.
-- Sent in a transaction that holds the key's fence bucket shared (rw_gate.sql), which
-- every other acquisition of :key takes exclusively for its statement: no exclusive
-- grant of :key commits meanwhile. INSERT ... SELECT reads the rows it tests with
-- shared locks, so it reads them as committed; the waiting writers' intents are found
-- by a range of the primary key (its binary collation puts every ':key@write:<owner>'
-- between ':key@write:' and ':key@write;'), so it reads and locks the name's own rows
-- alone, never the whole table. That range skips rows another transaction holds locked
-- (SKIP LOCKED): a range read also locks the first key past its end, which may be any
-- key's, held by a for-update holder for its whole transaction; an intent row skipped
-- so is one being written at that instant (taken or renewed), and a reader that
-- arrives in that instant goes ahead of its writer. With a lock wait timeout of zero,
-- any other row another transaction holds locked (a for-update holder of :key) fails
-- the statement at once (contention).
-- The reader row is this owner's alone, so the update below is a re-entry when the row
-- is live with holds, and a new grant otherwise. MariaDB assigns from left to right,
-- each assignment seeing those before it: the token and the hold count are assigned
-- first, from the row as it was; a hold count above one then tells a re-entry.
-- No row comes back when the read is not granted; the row's hold_count tells a new
-- hold (1) from a re-entry.
-- Presence: the read records the handle's marker :presence as lease_acquire.sql
-- records it, only while a connection holds it; marked says whether it did. A writer
-- that finds the name busy drops the reads whose markers are free (rw_gone.sql,
-- rw_drop_gone.sql).
SET STATEMENT innodb_lock_wait_timeout = 0 FOR
INSERT INTO `{table}`
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token, presence_key)
SELECT CONCAT(:key, '@read:', :owner), :owner, :strategy, TRUE, UTC_TIMESTAMP(6),
       UTC_TIMESTAMP(6), :ttl_us, UTC_TIMESTAMP(6) + INTERVAL :ttl_us MICROSECOND,
       1, NEXTVAL(`{table}_fence_seq`),
       IF(IS_USED_LOCK(NULLIF(:presence, '')) IS NULL, NULL, :presence)
FROM DUAL
WHERE EXISTS (
        SELECT 1 FROM `{table}` AS m
        WHERE m.lock_key = CONCAT(:key, '@read:', :owner)
          AND m.locked AND m.expires_at > UTC_TIMESTAMP(6)
          AND m.lock_owner = :owner AND m.hold_count > 0)
   OR (NOT EXISTS (
        SELECT 1 FROM `{table}` AS w
        WHERE w.lock_key = :key AND w.locked AND w.expires_at > UTC_TIMESTAMP(6)
          AND NOT (w.lock_owner = '' AND w.lock_strategy = 'read')
          AND NOT (w.lock_owner = :owner AND w.lock_strategy = 'write' AND w.hold_count > 0))
       AND (EXISTS (
        SELECT 1 FROM `{table}` AS o
        WHERE o.lock_key = :key AND o.locked AND o.expires_at > UTC_TIMESTAMP(6)
          AND o.lock_owner = :owner AND o.lock_strategy = 'write' AND o.hold_count > 0)
        OR NOT EXISTS (
        SELECT 1 FROM `{table}` AS i
        WHERE i.lock_key >= CONCAT(:key, '@write:') AND i.lock_key < CONCAT(:key, '@write;')
          AND CHAR_LENGTH(i.lock_key) = CHAR_LENGTH(:key) + 43
          AND i.locked AND i.expires_at > UTC_TIMESTAMP(6)
          AND i.lock_owner <> :owner
        LOCK IN SHARE MODE SKIP LOCKED)))
ON DUPLICATE KEY UPDATE
    fencing_token = IF(locked AND expires_at > VALUES(lock_time) AND hold_count > 0,
                       fencing_token,
                       GREATEST(NEXTVAL(`{table}_fence_seq`), fencing_token + 1)),
    hold_count = IF(locked AND expires_at > VALUES(lock_time) AND hold_count > 0,
                    hold_count + 1, 1),
    expires_at = IF(hold_count > 1, GREATEST(expires_at, VALUES(expires_at)),
                    VALUES(expires_at)),
    acquired_at = IF(hold_count > 1, acquired_at, VALUES(acquired_at)),
    lock_time = VALUES(lock_time),
    lock_duration = VALUES(lock_duration),
    lock_strategy = VALUES(lock_strategy),
    lock_owner = VALUES(lock_owner),
    presence_key = VALUES(presence_key),
    locked = TRUE
RETURNING
    lock_owner,
    fencing_token,
    TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', expires_at) AS expires_us,
    hold_count,
    lock_strategy,
    CAST(presence_key IS NOT NULL AS SIGNED) AS marked
