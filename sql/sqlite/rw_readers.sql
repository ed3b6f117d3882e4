-- How many live read holds of the read-write lock :key other owners than :owner have
-- (rows ':key@read:<owner>'): a writer holding :key is granted once this is 0.
-- The rows are a range of the primary key (its binary collation puts them between
-- ':key@read:' and ':key@read;'). Times are microseconds since the Unix epoch.
SELECT count(*) FROM "{table}" AS r
WHERE r.lock_key >= :key || '@read:' AND r.lock_key < :key || '@read;'
  AND length(r.lock_key) = length(:key) + 42
  AND r.locked
  AND r.expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
  AND r.lock_owner <> :owner
