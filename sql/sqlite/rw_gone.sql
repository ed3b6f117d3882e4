-- Presence: the live reads of the read-write lock :key (':key@read:<owner>') of other
-- owners than the asking writer :owner, with their owners, asked by that writer when
-- it found the name busy. SQLite keeps no marker in the table: the caller tries each
-- owner's marker file, and drops the reads of owners whose files are free (their
-- processes gone) by rw_drop_gone.sql, holding those files meanwhile. The reads are a
-- range of the primary key (between ':key@read:' and ':key@read;' in its binary
-- collation).
SELECT l.lock_key, l.lock_owner, l.fencing_token FROM "{table}" AS l
WHERE l.lock_key >= :key || '@read:' AND l.lock_key < :key || '@read;'
  AND length(l.lock_key) = length(:key) + 42
  AND l.locked AND l.hold_count > 0
  AND l.lock_owner <> :owner
  AND l.expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
