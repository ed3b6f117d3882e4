-- An operator's release of the name :key (db/shared.rs), in a writing transaction:
-- the holds to release with it, by key: every live read of the read-write lock :key
-- (':key@read:<owner>'), every live permit of the semaphore :key
-- ('semaphore:<key>#<slot>', by the N recorded for it), and the name's own row when it
-- is held in shared mode (no owner). The reads are a range of the primary key
-- (between ':key@read:' and ':key@read;' in its binary collation).
SELECT l.lock_key FROM "{table}" AS l
WHERE l.lock_key >= :key || '@read:' AND l.lock_key < :key || '@read;'
  AND length(l.lock_key) = length(:key) + 42
  AND l.locked AND l.expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
UNION ALL
SELECT l.lock_key FROM (
    WITH RECURSIVE seq (slot) AS (
        SELECT 0 UNION ALL SELECT slot + 1 FROM seq WHERE slot + 1 < 1000
    )
    SELECT 'semaphore:' || m.name || '#' || seq.slot AS k
    FROM "{table}_semaphores" AS m JOIN seq ON seq.slot < m.permits
    WHERE m.name = :key
) AS s
JOIN "{table}" AS l ON l.lock_key = s.k
WHERE l.locked AND l.expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
UNION ALL
SELECT l.lock_key FROM "{table}" AS l
WHERE l.lock_key = :key AND l.lock_owner = ''
  AND l.locked AND l.expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
