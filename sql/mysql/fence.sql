-- A fenced write's check, run in the holder's own transaction: is the lease on :key
-- still held by :owner with :token, unexpired? The shared row lock keeps it so until
-- that transaction ends: a takeover (and a renewal) waits for it, so the holder's
-- writes in the same transaction commit only while the lock was really theirs.
-- Two seconds at most on a row lock, longer than any wait sqlock's own statements
-- make while they hold this row (a second): held that long, the row is a for-update
-- holder's, which only holds a key whose lease is not live, so the answer is "not
-- held".
SET STATEMENT innodb_lock_wait_timeout = 2 FOR
SELECT 1 FROM `{table}`
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND expires_at > UTC_TIMESTAMP(6)
LOCK IN SHARE MODE
