-- elect_claim, with a notification (LockerBuilder::notify_waiters): the same claim,
-- and when it is recorded, pg_notify tells the listeners of the table's channel that
-- the election's key changed hands, in the same statement, so that observers read the
-- new leader at once. PostgreSQL delivers it at commit, so an observer it wakes reads
-- the claim. One row per claim recorded.
-- The payload names the table (its oid: two schemas' tables of one name share the
-- channel) and then the key; a listener ignores a payload that names another table.
WITH claimed AS (
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
    RETURNING e.lock_key
)
SELECT lock_key,
       pg_notify('{channel}', CAST(CAST('"{table}"' AS regclass) AS oid)::TEXT || ':' || lock_key)
FROM claimed
