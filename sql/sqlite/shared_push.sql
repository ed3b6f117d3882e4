-- Last in the extension of a hold of a name in shared mode (db/shared.rs), right after
-- the hold :hold of :owner was extended in the same transaction (lease_extend.sql):
-- the name :key is pushed to expire no sooner than the hold now does, its expiry read
-- from the hold's row (each statement reads its own clock, so a time of this one's
-- could fall short of the hold's). It is pushed while it is live and held in shared
-- mode, or by :owner as the write side (a downgrade's name, held by its writer); no
-- row matches otherwise, and the caller rolls the extension back. An expiry already
-- later stays. The hold's row was locked first, by its extension.
UPDATE "{table}" AS n SET
    lock_time = t.now,
    lock_duration = max(n.expires_at, h.expires_at) - t.now,
    expires_at = max(n.expires_at, h.expires_at)
FROM (SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) AS now) AS t,
     "{table}" AS h
WHERE n.lock_key = :key
  AND (n.lock_owner = '' OR (n.lock_owner = :owner AND n.lock_strategy = 'write'))
  AND n.locked
  AND n.expires_at > t.now
  AND h.lock_key = :hold
  AND h.lock_owner = :owner
  AND h.locked
