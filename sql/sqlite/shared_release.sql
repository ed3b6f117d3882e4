-- A hold of a name in shared mode (a read of a read-write lock, a semaphore's permit)
-- gives back one hold of :key if it is still ours: same owner, same token, unexpired.
-- The last hold frees the row (locked = 0, expiring now). The holds left come back,
-- 0 when this was the last; none when the hold was no longer ours. The caller then
-- gives back the name's count (shared_leave.sql) in the same transaction.
-- A lease with no hold left, revoked by an operator (force_release), is freed at
-- once by its holder's release: that is the holder giving it back. The count never
-- goes below 0.
UPDATE "{table}" SET
    locked = hold_count > 1,
    expires_at = CASE WHEN hold_count > 1 THEN expires_at
                      ELSE CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) END,
    hold_count = max(hold_count - 1, 0)
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
RETURNING hold_count
