-- A fair holder gives back one hold without the queue, when nobody is queued for the
-- key: as lease_release (the same owner, token and expiry checks),
-- but for a last hold only while no fair waiter is queued. No row changed (a waiter
-- queued, or the lock no longer ours) sends the release through the queue's step
-- (fair/steps.rs), under the key's gate, which hands the lock on in the same
-- transaction, and tells the two apart. An inner hold is given back here whatever
-- the queue: it frees nothing.
-- SQLite runs one writer at a time and a writer reads the latest commit, so the
-- queue is read as it stands: live places of waiters not yet handed a grant.
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
  AND (hold_count > 1
       OR NOT EXISTS (SELECT 1 FROM "{table}_queue" AS q
                      WHERE q.lock_key = :key AND q.granted_token IS NULL
                        AND q.expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)))
