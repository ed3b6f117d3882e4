-- How many live read holds of the read-write lock :key other owners than :owner have
-- (rows ':key@read:<owner>'): a writer holding :key is granted once this is 0. A
-- consistent read: it waits on no row lock.
SELECT COUNT(*) FROM `{table}` AS r
WHERE SUBSTRING(r.lock_key, 1, CHAR_LENGTH(:key) + 6) = CONCAT(:key, '@read:')
  AND CHAR_LENGTH(r.lock_key) = CHAR_LENGTH(:key) + 42
  AND r.locked AND r.expires_at > UTC_TIMESTAMP(6)
  AND r.lock_owner <> :owner
