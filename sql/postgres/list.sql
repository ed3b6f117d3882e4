-- The locks held now (locked and unexpired on the database clock), by key, with the
-- database's own time so that "expires in" needs no client clock.
SELECT lock_key,
       lock_strategy,
       lock_owner,
       fencing_token,
       hold_count,
       (extract(epoch FROM acquired_at) * 1000000)::BIGINT AS acquired_us,
       (extract(epoch FROM expires_at) * 1000000)::BIGINT AS expires_us,
       (extract(epoch FROM statement_timestamp()) * 1000000)::BIGINT AS now_us
FROM "{table}"
WHERE locked
  AND expires_at > statement_timestamp()
ORDER BY lock_key
LIMIT :limit
