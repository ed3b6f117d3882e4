-- How many live read holds of the read-write lock :key other owners than :owner have
-- (rows ':key@read:<owner>'): a writer holding :key is granted once this is 0.
SELECT count(*) FROM "{table}" AS r
WHERE substr(r.lock_key, 1, char_length(:key) + 6) = :key || '@read:'
  AND char_length(r.lock_key) = char_length(:key) + 42
  AND r.locked AND r.expires_at > statement_timestamp()
  AND r.lock_owner <> :owner
