-- The insert strategy's release of its last hold: delete the row, so that a free lock
-- is no row at all (the delete trigger keeps the key's tokens rising). Matches only
-- when the lease is still ours with one hold left; otherwise lease_release gives back
-- one of several holds.
-- A row with no hold left, revoked by an operator (force_release), is deleted by its
-- holder's release too: that is the holder giving it back.
DELETE FROM "{table}"
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND hold_count <= 1
  AND expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
