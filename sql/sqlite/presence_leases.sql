-- Presence (LockerBuilder::presence): how many live leases the owner whose marker file
-- is :presence (on SQLite a marker file is named for its owner) still holds with a
-- hold, the leases an acquisition could take over from it. Asked by the sweep about a
-- marker file whose process is gone (its lock free): with none, the file is removed.
SELECT count(*)
FROM "{table}"
WHERE lock_owner = :presence
  AND locked
  AND hold_count > 0
  AND expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
