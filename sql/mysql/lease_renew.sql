-- The watchdog's tick: renew, in one statement, every lease in :batch (a JSON array of
-- [key, token] pairs, [key, token, name] for a hold of a name in shared mode) that :owner still holds with that token, to :ttl_us from
-- now. The batch drives the join, so each key is one primary-key lookup. FORCE INDEX
-- keeps it so: on a table of a few rows MariaDB's planner may prefer to scan it, and a
-- scanning UPDATE locks every row it reads, so it would wait behind a for-update
-- holder's row lock on another key until the leases lapsed. The matched count comes
-- back (each row counted once per alias it is updated through); only when it falls
-- short of the batch and its names does lease_survivors tell which.
-- No wait on a row lock: the row of a lease that lapsed may be held by a for-update
-- holder for a whole transaction, and the whole batch would wait for it (and a
-- renewal is cut off after a period, which may be shorter than any wait MariaDB can
-- bound). A locked row fails the statement at once; lease_survivors, which waits on
-- nothing, then tells which leases are still ours, and lease_renew_again renews those.
--
-- A hold of a name in shared mode (a read ':name@read:<owner>', a permit
-- 'semaphore:<name>#<slot>') comes with its name (none, NULL, for any other lease,
-- which so looks nothing up), joined as p: the name's row must never expire before
-- the hold. A hold is renewed only
-- together with its name, in the same statement, and only while the name is live and
-- held in shared mode or by :owner (a downgrade's name, held by its writer, which may
-- be a lease of this batch too: the row is then updated through both aliases, each
-- time to the later expiry). A name pushed for a hold is pushed as far as the hold.
-- A lease with no hold left is never renewed: an operator revoked it (force_release:
-- its holder is to give it back), or an at-least hold keeps it after its release. Its
-- holder learns of it as of any lease lost, and the row lapses at its expiry. A name
-- held in shared mode counts its holds, so it has some while it is live.
SET STATEMENT innodb_lock_wait_timeout = 0 FOR
UPDATE JSON_TABLE(:batch, '$[*]' COLUMNS (
           k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$[0]',
           t BIGINT PATH '$[1]',
           p VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$[2]')) AS b
    STRAIGHT_JOIN `{table}` AS l FORCE INDEX (PRIMARY) ON l.lock_key = b.k AND l.fencing_token = b.t
    LEFT JOIN `{table}` AS p FORCE INDEX (PRIMARY) ON p.lock_key = b.p
-- A renewal never shortens a lease: after an extension or a re-entry with a longer TTL
-- the later expiry stays. A multi-table UPDATE assigns in no set order, so
-- lock_duration reads the same whether it sees expires_at before or after its update.
SET l.lock_time = UTC_TIMESTAMP(6),
    l.lock_duration = GREATEST(:ttl_us, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), l.expires_at)),
    l.expires_at = GREATEST(l.expires_at, UTC_TIMESTAMP(6) + INTERVAL :ttl_us MICROSECOND),
    p.lock_time = UTC_TIMESTAMP(6),
    p.lock_duration = GREATEST(:ttl_us, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), p.expires_at)),
    p.expires_at = GREATEST(p.expires_at, UTC_TIMESTAMP(6) + INTERVAL :ttl_us MICROSECOND)
WHERE l.lock_owner = :owner
  AND l.locked
  AND l.hold_count > 0
  AND l.expires_at > UTC_TIMESTAMP(6)
  AND (b.p IS NULL
       OR (p.locked
           AND p.hold_count > 0
           AND p.expires_at > UTC_TIMESTAMP(6)
           AND (p.lock_owner = '' OR p.lock_owner = :owner)))
