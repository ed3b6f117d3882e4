-- Presence: a gone reader's read :key, dropped by a writer that found its owner's
-- marker file free and holds it (rw_gone.sql), when it is still that reader's hold
-- (:owner, :token). Its token moves on, as an operator's drop moves it
-- (shared_drop.sql), and the same transaction counts the name one hold less
-- (shared_leave.sql). One row when the read was dropped.
UPDATE "{table}" SET
    locked = 0,
    hold_count = 0,
    expires_at = CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER),
    fencing_token = fencing_token + 1
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND hold_count > 0
  AND expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
