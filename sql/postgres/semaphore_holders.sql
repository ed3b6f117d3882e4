-- The live permits of a semaphore of :permits slots on the keys :prefix || slot, as
-- list.sql shows locks, by slot. :owner, :count and :ttl_us are not read.
SELECT l.lock_key,
       l.lock_strategy,
       l.lock_owner,
       l.fencing_token,
       l.hold_count,
       (extract(epoch FROM l.acquired_at) * 1000000)::BIGINT AS acquired_us,
       (extract(epoch FROM l.expires_at) * 1000000)::BIGINT AS expires_us,
       (extract(epoch FROM statement_timestamp()) * 1000000)::BIGINT AS now_us,
       0::BIGINT AS waiters
FROM generate_series(0, :permits - 1) AS s(slot)
JOIN "{table}" AS l ON l.lock_key = CAST(:prefix AS TEXT) || s.slot
WHERE l.locked
  AND l.expires_at > statement_timestamp()
ORDER BY s.slot
