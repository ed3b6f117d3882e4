-- The lock on :key, if it is held now (locked and unexpired on the database clock), as
-- list reports locks (with the live fair waiters queued): a point lookup by primary
-- key.
SELECT lock_key,
       lock_strategy,
       lock_owner,
       fencing_token,
       hold_count,
       (extract(epoch FROM acquired_at) * 1000000)::BIGINT AS acquired_us,
       (extract(epoch FROM expires_at) * 1000000)::BIGINT AS expires_us,
       (extract(epoch FROM statement_timestamp()) * 1000000)::BIGINT AS now_us,
       (SELECT count(*) FROM "{table}_queue" AS q
        WHERE q.lock_key = "{table}".lock_key
          AND q.granted_token IS NULL
          AND q.expires_at > statement_timestamp()) AS waiters
FROM "{table}"
WHERE lock_key = :key
  AND locked
  AND expires_at > statement_timestamp()
