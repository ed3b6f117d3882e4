-- The leader of the election on :key, if it has one now: the live lease on the key
-- and the identity claimed for that lease's term, read together in one statement. A
-- lease whose term has no claim (a candidate between its grant and its claim, or a
-- plain lock on the key) is no leader.
SELECT l.lock_owner,
       l.fencing_token,
       e.leader_id,
       (extract(epoch FROM l.acquired_at) * 1000000)::BIGINT AS acquired_us,
       (extract(epoch FROM l.expires_at) * 1000000)::BIGINT AS expires_us,
       (extract(epoch FROM statement_timestamp()) * 1000000)::BIGINT AS now_us
FROM "{table}" AS l
JOIN "{table}_leaders" AS e
  ON e.lock_key = l.lock_key AND e.leader_term = l.fencing_token
WHERE l.lock_key = :key
  AND l.locked
  AND l.expires_at > statement_timestamp()
