-- The live permits of a semaphore of :permits slots on the keys CONCAT(:prefix, slot),
-- as list.sql shows locks, by slot, with whether each holder is gone (as list.sql says
-- it).
WITH RECURSIVE seq (slot) AS (
    SELECT 0 UNION ALL SELECT slot + 1 FROM seq WHERE slot + 1 < :permits
)
SELECT l.lock_key,
       l.lock_strategy,
       l.lock_owner,
       l.fencing_token,
       l.hold_count,
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', l.acquired_at) AS acquired_us,
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', l.expires_at) AS expires_us,
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) AS now_us,
       CAST(0 AS SIGNED) AS waiters,
       CAST(l.presence_key IS NOT NULL
            AND IS_USED_LOCK(l.presence_key) IS NULL
            AND SUBSTRING_INDEX(SUBSTRING_INDEX(l.presence_key, ':', 2), ':', -1)
                = CAST(@@server_id AS CHAR)
            AND l.acquired_at >= UTC_TIMESTAMP() + INTERVAL 1 SECOND - INTERVAL (SELECT VARIABLE_VALUE
                FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'UPTIME') SECOND
            AS SIGNED) AS gone
FROM seq
JOIN `{table}` AS l ON l.lock_key = CONCAT(:prefix, seq.slot)
WHERE l.locked
  AND l.expires_at > UTC_TIMESTAMP(6)
ORDER BY seq.slot
