-- An election's claim (Locker::election): records :identity as the leader of term
-- :token of the election on :key, right after the candidate's lease was granted. It
-- succeeds (one row) only while that lease is still the candidate's (same owner, same
-- token, unexpired on the database clock), and never puts back an older term over a
-- newer one. No row: the lease was lost between the grant and the claim.
INSERT INTO "{table}_leaders" AS e (lock_key, leader_term, leader_id)
SELECT l.lock_key, l.fencing_token, :identity
FROM "{table}" AS l
WHERE l.lock_key = :key
  AND l.lock_owner = :owner
  AND l.fencing_token = :token
  AND l.locked
  AND l.expires_at > statement_timestamp()
ON CONFLICT (lock_key) DO UPDATE SET
    leader_term = EXCLUDED.leader_term,
    leader_id = EXCLUDED.leader_id
WHERE e.leader_term <= EXCLUDED.leader_term
