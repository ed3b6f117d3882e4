-- An operator's release of :key, whoever holds it. The token moves on, so the old
-- holder's renewals, releases and fenced writes all fail from now on.
-- A name held in shared mode (no owner: reads of a read-write lock, permits of a
-- semaphore) is not released here: its holds are released with it in one transaction
-- (shared_force.sql), and a name a new read or permit took since is theirs.
UPDATE "{table}" SET
    locked = 0,
    hold_count = 0,
    expires_at = CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER),
    fencing_token = fencing_token + 1
WHERE lock_key = :key
  AND locked
  AND lock_owner <> ''
  AND expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
