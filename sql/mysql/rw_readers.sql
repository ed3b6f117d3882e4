-- How many live read holds of the read-write lock :key other owners than :owner have
-- (rows ':key@read:<owner>'): a writer holding :key is granted once this is 0. A
-- consistent read: it waits on no row lock. The rows are a range of the primary key
-- (its binary collation puts them between ':key@read:' and ':key@read;').
SELECT COUNT(*) FROM `{table}` AS r
WHERE r.lock_key >= CONCAT(:key, '@read:') AND r.lock_key < CONCAT(:key, '@read;')
  AND CHAR_LENGTH(r.lock_key) = CHAR_LENGTH(:key) + 42
  AND r.locked AND r.expires_at > UTC_TIMESTAMP(6)
  AND r.lock_owner <> :owner
