-- The locks held now (locked and unexpired on the database clock), by key, with the
-- database's own time so that "expires in" needs no client clock, and how many live
-- waiters of the fair strategy are queued for each.
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
WHERE locked
  AND expires_at > statement_timestamp()
ORDER BY lock_key
LIMIT :limit
