-- Hand :key to the waiter :ticket (owner :owner) when the lock is free or expired: a
-- new grant with a new fencing token, lasting as long as the waiter's place does (the
-- waiter pushes it to its TTL when it takes the grant up), so a grant handed to a
-- waiter that died meanwhile lapses with its place. No row when the lock is held.
UPDATE "{table}" AS l SET
    lock_owner = :owner,
    lock_strategy = 'fair',
    locked = TRUE,
    acquired_at = statement_timestamp(),
    lock_time = statement_timestamp(),
    lock_duration = (extract(epoch FROM q.expires_at - statement_timestamp()) * 1000000)::BIGINT,
    expires_at = q.expires_at,
    hold_count = 1,
    fencing_token = greatest(nextval('"{table}_fence_seq"'), l.fencing_token + 1),
    presence_key = NULL
FROM "{table}_queue" AS q
WHERE l.lock_key = :key
  AND q.ticket = :ticket
  AND q.lock_key = :key
  AND q.expires_at > statement_timestamp()
  AND (NOT l.locked OR l.expires_at <= statement_timestamp())
RETURNING l.fencing_token
