-- Presence: a gone reader's read :key, dropped by a writer that found it (rw_gone.sql)
-- when it is still that reader's hold (:owner, :token) and its marker still free. The
-- row stays locked until the transaction commits: a reader that takes its marker back
-- meanwhile and checks its reads waits for that, then finds its read gone, and its
-- lost signal fires. Its token moves on, as an operator's drop moves it
-- (shared_drop.sql), and the same transaction counts the name one hold less
-- (shared_leave.sql). Assigned left to right: the token first, while the row reads as
-- held. A second at most on a row lock (a renewal under way): tried again later.
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
UPDATE `{table}` SET
    fencing_token = GREATEST(NEXTVAL(`{table}_fence_seq`), fencing_token + 1),
    hold_count = 0,
    expires_at = UTC_TIMESTAMP(6),
    locked = FALSE
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND hold_count > 0
  AND expires_at > UTC_TIMESTAMP(6)
  AND presence_key IS NOT NULL
  AND IS_USED_LOCK(presence_key) IS NULL
  AND SUBSTRING_INDEX(SUBSTRING_INDEX(presence_key, ':', 2), ':', -1)
      = CAST(@@server_id AS CHAR)
  AND acquired_at >= UTC_TIMESTAMP() + INTERVAL 1 SECOND - INTERVAL (SELECT VARIABLE_VALUE
      FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'UPTIME') SECOND
