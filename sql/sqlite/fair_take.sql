-- Hand :key to the waiter :ticket (owner :owner) when the lock is free or expired: a
-- new grant with a new fencing token, lasting as long as the waiter's place does (the
-- waiter pushes it to its TTL when it takes the grant up), so a grant handed to a
-- waiter that died meanwhile lapses with its place. No row when the lock is held.
-- Presence: SQLite keeps no marker in the table. :gone is a JSON array of owners whose
-- presence marker files the caller found free and holds while this statement runs
-- ('[]' for none): their processes died, and a live lock of theirs is free too.
UPDATE "{table}" AS l SET
    lock_owner = :owner,
    lock_strategy = 'fair',
    locked = 1,
    acquired_at = n.now,
    lock_time = n.now,
    lock_duration = q.expires_at - n.now,
    expires_at = q.expires_at,
    hold_count = 1,
    fencing_token = l.fencing_token + 1
FROM (SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) AS now) AS n, "{table}_queue" AS q
WHERE l.lock_key = :key
  AND q.ticket = :ticket
  AND q.lock_key = :key
  AND q.expires_at > n.now
  AND (NOT l.locked
       OR l.expires_at <= n.now
       OR (l.hold_count > 0 AND l.lock_owner IN (SELECT value FROM json_each(:gone))))
RETURNING fencing_token
