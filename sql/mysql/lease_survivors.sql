-- After a renewal that matched fewer rows than its batch: which leases of :batch does
-- :owner still hold with their tokens (a hold of a name in shared mode: with its name
-- still live, as lease_renew renews it)? The others are lost. Primary-key lookups
-- only, as in lease_renew.
SELECT l.lock_key
FROM JSON_TABLE(:batch, '$[*]' COLUMNS (
         k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$[0]',
         t BIGINT PATH '$[1]',
         p VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$[2]')) AS b
    STRAIGHT_JOIN `{table}` AS l FORCE INDEX (PRIMARY) ON l.lock_key = b.k AND l.fencing_token = b.t
    LEFT JOIN `{table}` AS p FORCE INDEX (PRIMARY) ON p.lock_key = b.p
WHERE l.lock_owner = :owner
  AND l.locked
  AND l.hold_count > 0
  AND l.expires_at > UTC_TIMESTAMP(6)
  AND (b.p IS NULL
       OR (p.locked
           AND p.hold_count > 0
           AND p.expires_at > UTC_TIMESTAMP(6)
           AND (p.lock_owner = '' OR p.lock_owner = :owner)))
