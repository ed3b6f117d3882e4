-- An election's claim (Locker::election): records :identity as the leader of term
-- :token of the election on :key, right after the candidate's lease was granted. It
-- succeeds (one row changed) only while that lease is still the candidate's (same
-- owner, same token, unexpired on the database clock), and never puts back an older
-- term over a newer one. No row: the lease was lost between the grant and the claim.
-- (The SELECT's WHERE clause also keeps SQLite from reading ON CONFLICT as a join.)
INSERT INTO "{table}_leaders" (lock_key, leader_term, leader_id)
SELECT l.lock_key, l.fencing_token, :identity
FROM "{table}" AS l
WHERE l.lock_key = :key
  AND l.lock_owner = :owner
  AND l.fencing_token = :token
  AND l.locked
  AND l.expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
ON CONFLICT (lock_key) DO UPDATE SET
    leader_term = excluded.leader_term,
    leader_id = excluded.leader_id
WHERE "{table}_leaders".leader_term <= excluded.leader_term
