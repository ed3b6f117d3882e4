-- An operator's release of the name :key (db/shared.rs), under the key's gate: the
-- holds to release with it, by key: every live read of the read-write lock :key
-- (':key@read:<owner>'), every live permit of the semaphore :key
-- ('semaphore:<key>#<slot>', by the N recorded for it), and the name's own row when it
-- is held in shared mode (no owner). Under the gate no read or permit of the name is
-- granted meanwhile, so the set stands until the release that follows.
-- The reads are a range of the rw index, as rw_read.sql finds intents.
SELECT l.lock_key FROM "{table}" AS l
WHERE (strpos(l.lock_key, '@read:') > 0 OR strpos(l.lock_key, '@write:') > 0)
  AND l.lock_key COLLATE "C" >= (:key || '@read:') COLLATE "C"
  AND l.lock_key COLLATE "C" < (:key || '@read;') COLLATE "C"
  AND char_length(l.lock_key) = char_length(:key) + 42
  AND l.locked AND l.expires_at > statement_timestamp()
UNION ALL
SELECT l.lock_key FROM "{table}_semaphores" AS m
CROSS JOIN generate_series(0, m.permits - 1) AS s(slot)
JOIN "{table}" AS l ON l.lock_key = 'semaphore:' || m.name || '#' || s.slot
WHERE m.name = :key
  AND l.locked AND l.expires_at > statement_timestamp()
UNION ALL
SELECT l.lock_key FROM "{table}" AS l
WHERE l.lock_key = :key AND l.lock_owner = ''
  AND l.locked AND l.expires_at > statement_timestamp()
