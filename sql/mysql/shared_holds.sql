-- An operator's release of the name :key (db/shared.rs), under the key's gate: the
-- holds to release with it, by key: every live read of the read-write lock :key
-- (':key@read:<owner>'), every live permit of the semaphore :key
-- ('semaphore:<key>#<slot>', by the N recorded for it), and the name's own row when it
-- is held in shared mode (no owner). Under the gate no read or permit of the name is
-- granted meanwhile, so the set stands until the release that follows, which updates
-- the rows by key alone (a locking range would lock the key past its end too, which
-- may be a for-update holder's). A consistent read: it waits on no row lock. The reads
-- are a range of the primary key (its binary collation puts them between ':key@read:'
-- and ':key@read;').
SELECT l.lock_key FROM `{table}` AS l
WHERE l.lock_key >= CONCAT(:key, '@read:') AND l.lock_key < CONCAT(:key, '@read;')
  AND CHAR_LENGTH(l.lock_key) = CHAR_LENGTH(:key) + 42
  AND l.locked AND l.expires_at > UTC_TIMESTAMP(6)
UNION ALL
SELECT l.lock_key FROM (
    WITH RECURSIVE seq (slot) AS (
        SELECT 0 UNION ALL SELECT slot + 1 FROM seq WHERE slot + 1 < 1000
    )
    SELECT CONCAT('semaphore:', m.name, '#', seq.slot) AS k
    FROM `{table}_semaphores` AS m JOIN seq ON seq.slot < m.permits
    WHERE m.name = :key
) AS s
JOIN `{table}` AS l ON l.lock_key = s.k
WHERE l.locked AND l.expires_at > UTC_TIMESTAMP(6)
UNION ALL
SELECT l.lock_key FROM `{table}` AS l
WHERE l.lock_key = :key AND l.lock_owner = ''
  AND l.locked AND l.expires_at > UTC_TIMESTAMP(6)
