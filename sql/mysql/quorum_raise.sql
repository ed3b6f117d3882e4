-- A quorum lock's token raised to :quorum (sqlock::Quorum), on a database where the
-- holder's lease on :key (owner :owner, token :token) is still its own and unexpired:
-- LOCK IN SHARE MODE reads the lease row with a shared lock (whatever the session's
-- isolation), so a takeover or an operator's release waits for this statement. Never lowered. No matched row: the lease was lost meanwhile, and
-- this database does not count towards the majority that saw the token. A second at
-- most on a row lock, as the releases wait.
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
INSERT INTO `{table}_quorum` (lock_key, quorum_token)
SELECT l.lock_key, :quorum
FROM `{table}` AS l
WHERE l.lock_key = :key
  AND l.lock_owner = :owner
  AND l.fencing_token = :token
  AND l.locked
  AND l.expires_at > UTC_TIMESTAMP(6)
LOCK IN SHARE MODE
ON DUPLICATE KEY UPDATE
    quorum_token = GREATEST(quorum_token, VALUES(quorum_token))
