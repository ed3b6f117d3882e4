-- A fair join marks the key's row queued (see the migration), in its transaction,
-- under the key's gate, before it looks for a lock to hand on: from its commit on, a
-- fair acquisition goes through the queue rather than taking the lock at once
-- (lease_acquire), and a fair release hands the lock on rather than freeing it
-- (fair_release). One matched row when the row the join ensured is still there (a
-- row deleted meanwhile by a sweep or an insert holder's release matches none, and
-- the place stays unflagged: see docs/guarantees.md, "Nobody queued").
UPDATE "{table}" SET queued = TRUE WHERE lock_key = :key
