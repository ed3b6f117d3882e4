-- A quorum lock's token raised to :quorum (sqlock::Quorum), on a database where the
-- holder's lease on :key (owner :owner, token :token) is still its own and unexpired:
-- FOR SHARE locks the lease row, so a takeover or an operator's release of it waits
-- for this statement, and one that committed meanwhile is seen. Never lowered. No row: the lease was lost meanwhile, and this database
-- does not count towards the majority that saw the token.
INSERT INTO "{table}_quorum" AS q (lock_key, quorum_token)
SELECT l.lock_key, :quorum
FROM "{table}" AS l
WHERE l.lock_key = :key
  AND l.lock_owner = :owner
  AND l.fencing_token = :token
  AND l.locked
  AND l.expires_at > statement_timestamp()
FOR SHARE OF l
ON CONFLICT (lock_key) DO UPDATE SET
    quorum_token = GREATEST(q.quorum_token, EXCLUDED.quorum_token)
