-- Presence: the live reads of the read-write lock :key (':key@read:<owner>') of other
-- owners than the asking writer :owner whose holders are gone: each records a presence
-- marker of this server's lifetime that no connection holds any more (as
-- lease_acquire.sql decides it). Asked by a writer that found the name busy; each read
-- found is then dropped by rw_drop_gone.sql, which asks again under the read's row
-- lock. A consistent read: it waits on no row lock. The reads are a range of the
-- primary key (its binary collation puts them between ':key@read:' and ':key@read;').
SELECT l.lock_key, l.lock_owner, l.fencing_token FROM `{table}` AS l
WHERE l.lock_key >= CONCAT(:key, '@read:') AND l.lock_key < CONCAT(:key, '@read;')
  AND CHAR_LENGTH(l.lock_key) = CHAR_LENGTH(:key) + 42
  AND l.locked AND l.expires_at > UTC_TIMESTAMP(6)
  AND l.hold_count > 0
  AND l.lock_owner <> :owner
  AND l.presence_key IS NOT NULL
  AND IS_USED_LOCK(l.presence_key) IS NULL
  AND SUBSTRING_INDEX(SUBSTRING_INDEX(l.presence_key, ':', 2), ':', -1)
      = CAST(@@server_id AS CHAR)
  AND l.acquired_at >= UTC_TIMESTAMP() + INTERVAL 1 SECOND - INTERVAL (SELECT VARIABLE_VALUE
      FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'UPTIME') SECOND
