-- An operator's release of one hold of a name in shared mode, :key (a read, a permit),
-- whoever holds it: its token moves on, so its holder's renewals, releases and fenced
-- writes all fail from now on. The same transaction then counts the name one hold
-- less (shared_leave.sql).
UPDATE "{table}" SET
    locked = 0,
    hold_count = 0,
    expires_at = CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER),
    fencing_token = fencing_token + 1
WHERE lock_key = :key
  AND locked
  AND expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
