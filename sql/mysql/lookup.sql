-- The lock on :key, if it is held now (locked and unexpired on the database clock), as
-- list reports locks (with the live fair waiters queued): a point lookup by primary
-- key.
SELECT lock_key,
       lock_strategy,
       lock_owner,
       fencing_token,
       hold_count,
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', acquired_at) AS acquired_us,
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', expires_at) AS expires_us,
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) AS now_us,
       (SELECT count(*) FROM `{table}_queue` AS q
        WHERE q.lock_key = `{table}`.lock_key
          AND q.granted_token IS NULL
          AND q.expires_at > UTC_TIMESTAMP(6)) AS waiters
FROM `{table}`
WHERE lock_key = :key
  AND locked
  AND expires_at > UTC_TIMESTAMP(6)
