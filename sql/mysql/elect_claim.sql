-- An election's claim (Locker::election): records :identity as the leader of term
-- :token of the election on :key, right after the candidate's lease was granted. It
-- succeeds (a matched row) only while that lease is still the candidate's (same owner,
-- same token, unexpired on the database clock): INSERT ... SELECT reads the lease row
-- with a shared lock, so a takeover waits for this statement. It never puts back an
-- older term over a newer one. No row: the lease was lost between the grant and the
-- claim. A second at most on a row lock, as the releases wait: a row locked longer
-- fails the statement as contention, and the claim is tried again.
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
INSERT INTO `{table}_leaders` (lock_key, leader_term, leader_id)
SELECT l.lock_key, l.fencing_token, :identity
FROM `{table}` AS l
WHERE l.lock_key = :key
  AND l.lock_owner = :owner
  AND l.fencing_token = :token
  AND l.locked
  AND l.expires_at > UTC_TIMESTAMP(6)
ON DUPLICATE KEY UPDATE
    leader_id = IF(VALUES(leader_term) >= leader_term, VALUES(leader_id), leader_id),
    leader_term = GREATEST(leader_term, VALUES(leader_term))
