-- A quorum lock's token raised to :quorum (sqlock::Quorum), in a database where the
-- holder's lease on :key (owner :owner, token :token) is still its own and unexpired,
-- in one statement (SQLite writes one at a time). Never lowered. No row: the lease was
-- lost meanwhile, and this database does not count towards the majority that saw the
-- token. (The SELECT's WHERE clause also keeps SQLite from reading ON CONFLICT as a
-- join.)
INSERT INTO "{table}_quorum" (lock_key, quorum_token)
SELECT l.lock_key, :quorum
FROM "{table}" AS l
WHERE l.lock_key = :key
  AND l.lock_owner = :owner
  AND l.fencing_token = :token
  AND l.locked
  AND l.expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
ON CONFLICT (lock_key) DO UPDATE SET
    quorum_token = MAX("{table}_quorum".quorum_token, excluded.quorum_token)
