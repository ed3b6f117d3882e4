-- The watchdog's tick: renew, in one statement, every lease in :batch (a JSON array of
-- [key, token] pairs) that :owner still holds with that token, to :ttl_us from now.
-- The batch drives the join, so each key is one primary-key lookup. FORCE INDEX keeps it
-- so: on a table of a few rows MariaDB's planner may prefer to scan it, and a scanning
-- UPDATE locks every row it reads, so it would wait behind a for-update holder's row
-- lock on another key until the leases lapsed. The matched count
-- comes back; only when it falls short of the batch does lease_survivors tell which.
UPDATE JSON_TABLE(:batch, '$[*]' COLUMNS (
           k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$[0]',
           t BIGINT PATH '$[1]')) AS b
    STRAIGHT_JOIN `{table}` AS l FORCE INDEX (PRIMARY) ON l.lock_key = b.k AND l.fencing_token = b.t
SET l.lock_time = UTC_TIMESTAMP(6),
    l.lock_duration = :ttl_us,
    l.expires_at = UTC_TIMESTAMP(6) + INTERVAL :ttl_us MICROSECOND
WHERE l.lock_owner = :owner
  AND l.locked
  AND l.expires_at > UTC_TIMESTAMP(6)
