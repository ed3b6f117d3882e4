-- The live permits of a semaphore of :permits slots on the keys :prefix || slot, as
-- list.sql shows locks, by slot.
WITH RECURSIVE seq (slot) AS (
    SELECT 0 UNION ALL SELECT slot + 1 FROM seq WHERE slot + 1 < :permits
)
SELECT l.lock_key,
       l.lock_strategy,
       l.lock_owner,
       l.fencing_token,
       l.hold_count,
       l.acquired_at AS acquired_us,
       l.expires_at AS expires_us,
       n.now AS now_us,
       0 AS waiters
FROM seq
CROSS JOIN (SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) AS now) AS n
JOIN "{table}" AS l ON l.lock_key = :prefix || seq.slot
WHERE l.locked
  AND l.expires_at > n.now
ORDER BY seq.slot
