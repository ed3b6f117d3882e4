-- How many live read holds of the read-write lock :key other owners than :owner have
-- (rows ':key@read:<owner>'): a writer holding :key is granted once this is 0.
-- The rows are a range of the rw index (migration 20261127000001): it orders keys byte
-- by byte (COLLATE "C"), which puts them between ':key@read:' and ':key@read;'
-- whatever the database's collation (in which the primary key's order of punctuation
-- may not be its byte order), and it is partial, so the statement repeats its
-- predicate word for word for the planner to use it. The length check leaves out the
-- rows of other names that start with ':key@read:'.
SELECT count(*) FROM "{table}" AS r
WHERE (strpos(r.lock_key, '@read:') > 0 OR strpos(r.lock_key, '@write:') > 0)
  AND r.lock_key COLLATE "C" >= (:key || '@read:') COLLATE "C"
  AND r.lock_key COLLATE "C" < (:key || '@read;') COLLATE "C"
  AND char_length(r.lock_key) = char_length(:key) + 42
  AND r.locked AND r.expires_at > statement_timestamp()
  AND r.lock_owner <> :owner
