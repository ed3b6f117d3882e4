-- The leader of the election on :key, if it has one now: the live lease on the key
-- and the identity claimed for that lease's term, read together in one statement. A
-- lease whose term has no claim (a candidate between its grant and its claim, or a
-- plain lock on the key) is no leader. Times are microseconds since the Unix epoch.
SELECT l.lock_owner,
       l.fencing_token,
       e.leader_id,
       l.acquired_at AS acquired_us,
       l.expires_at AS expires_us,
       n.now AS now_us
FROM "{table}" AS l
JOIN "{table}_leaders" AS e
  ON e.lock_key = l.lock_key AND e.leader_term = l.fencing_token,
     (SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) AS now) AS n
WHERE l.lock_key = :key
  AND l.locked
  AND l.expires_at > n.now
