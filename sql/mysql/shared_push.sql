-- Last in the extension of a hold of a name in shared mode (db/shared.rs), right after
-- the hold :hold of :owner was extended in the same transaction (lease_extend.sql):
-- the name :key is pushed to expire no sooner than the hold now does, its expiry read
-- from the hold's row (each statement reads its own clock, so a time of this one's
-- could fall short of the hold's). It is pushed while it is live and held in shared
-- mode, or by :owner as the write side (a downgrade's name, held by its writer); no
-- row matches otherwise, and the caller rolls the extension back. An expiry already
-- later stays. The hold's row was locked first, by its extension.
-- A multi-table UPDATE assigns in no set order: each assignment reads the same
-- whether it sees the name's expiry before or after its update. A second at most on
-- a row lock.
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
UPDATE `{table}` AS n
    STRAIGHT_JOIN `{table}` AS h FORCE INDEX (PRIMARY) ON h.lock_key = :hold
SET n.lock_time = UTC_TIMESTAMP(6),
    n.lock_duration = TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6),
                                    GREATEST(n.expires_at, h.expires_at)),
    n.expires_at = GREATEST(n.expires_at, h.expires_at)
WHERE n.lock_key = :key
  AND (n.lock_owner = '' OR (n.lock_owner = :owner AND n.lock_strategy = 'write'))
  AND n.locked
  AND n.expires_at > UTC_TIMESTAMP(6)
  AND h.lock_owner = :owner
  AND h.locked
