-- A fenced write's check, run in the holder's own transaction: is the lease on :key
-- still held by :owner with :token, unexpired? SQLite has no row locks; its snapshot
-- isolation does the work: if a takeover commits after this read, the transaction's
-- first write fails (SQLITE_BUSY_SNAPSHOT) instead of writing on a stale check.
SELECT 1 FROM "{table}"
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
