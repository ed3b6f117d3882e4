-- Presence (LockerBuilder::presence): who holds the live lease on :key, when another
-- owner than :owner does. Asked only after an acquisition found the key busy and the
-- database has presence markers beside it: the caller then tries the holder's marker
-- (a file lock), and takes the lease when its process is gone (lease_acquire's :gone).
-- A row an at-least hold keeps (hold_count 0) has no holder to be gone: it lapses at
-- its expiry, whatever became of the process that released it.
SELECT lock_owner
FROM "{table}"
WHERE lock_key = :key
  AND lock_owner <> :owner
  AND locked
  AND hold_count > 0
  AND expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
