-- Presence: whether this very session still holds the marker :presence, asked by the
-- watchdog at each tick on the presence connection. Reads the server's lock table for
-- this backend only; takes no lock. 0 (or an error: the session is gone) means the
-- marker may have been free for a while, and the leases that record it may have been
-- taken.
SELECT count(*)
FROM pg_locks
WHERE locktype = 'advisory'
  AND pid = pg_backend_pid()
  AND classid = 1936813168
  AND objid = CAST(:presence AS INTEGER)::oid
  AND objsubid = 2
  AND granted
