-- Last in the extension of a hold of a name in shared mode (db/shared.rs), right after
-- the hold :hold of :owner was extended in the same transaction (lease_extend.sql):
-- the name :key is pushed to expire no sooner than the hold now does, its expiry read
-- from the hold's row (each statement reads its own clock, so a time of this one's
-- could fall short of the hold's). It is pushed while it is live and held in shared
-- mode, or by :owner as the write side (a downgrade's name, held by its writer); no
-- row matches otherwise, and the caller rolls the extension back. An expiry already
-- later stays. The hold's row was locked first, by its extension.
UPDATE "{table}" AS n SET
    lock_time = statement_timestamp(),
    lock_duration = (extract(epoch FROM greatest(n.expires_at, h.expires_at)
                                        - statement_timestamp()) * 1000000)::BIGINT,
    expires_at = greatest(n.expires_at, h.expires_at)
FROM "{table}" AS h
WHERE n.lock_key = :key
  AND (n.lock_owner = '' OR (n.lock_owner = :owner AND n.lock_strategy = 'write'))
  AND n.locked
  AND n.expires_at - statement_timestamp() > INTERVAL '0'
  AND h.lock_key = :hold
  AND h.lock_owner = :owner
  AND h.locked
