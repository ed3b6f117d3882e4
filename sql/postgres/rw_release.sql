-- The write side's release: one hold of the write side of the read-write lock :key
-- (its row records 'write') given back if it is still ours: same owner, same token,
-- unexpired. With the last:
-- - when :owner holds a live read of :key (a downgrade: the writer took the read
--   side), the name goes to that read in shared mode at once, with no moment free:
--   no owner, 'read', one hold, expiring with the read, no presence marker, its
--   fencing token kept; other readers then get in, and writers keep waiting;
-- - otherwise the name is free (locked = FALSE, expiring now), as a lease's release
--   leaves it.
-- The table decides, not the caller: every release of a write side (its guard's, a
-- dropped guard's, the give-back of an attempt whose caller stopped waiting) is this
-- statement, so none frees the name under its owner's read. One row per release.
-- Locks: the read's row first (FOR SHARE, in the CTE the update joins, read before
-- any row is updated), then the name's row: holds before their names, as every
-- statement that locks both (a renewal, a read's release). The read is read under
-- that lock, not from this statement's snapshot: a release of the read under way in
-- another transaction (which leaves the name alone: it is the writer's then) is
-- waited for and its outcome seen, so the name never counts a read that is gone. A
-- read of :owner granted at the same moment is not this statement's concern: the
-- handle sends no release of its write side while a read of its own of the name is
-- under way (strategy/release.rs).
-- Not waiting for the commit to reach disk, as lease_release.sql: a release grants
-- nobody, and one lost in a server crash leaves the name its writer's until it
-- expires (pushed by the read's renewals meanwhile), never free under the read.
WITH relaxed AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
), r AS MATERIALIZED (
    SELECT expires_at FROM "{table}"
    WHERE lock_key = :key || '@read:' || :owner
      AND lock_owner = :owner
      AND locked
      AND hold_count > 0
      AND expires_at > statement_timestamp()
    FOR SHARE
), d AS MATERIALIZED (
    SELECT (SELECT max(expires_at) FROM r) AS read_until, relaxed.setting FROM relaxed
)
UPDATE "{table}" AS n SET
    locked = n.hold_count > 1 OR d.read_until IS NOT NULL,
    lock_owner = CASE WHEN n.hold_count > 1 OR d.read_until IS NULL THEN n.lock_owner
                      ELSE '' END,
    lock_strategy = CASE WHEN n.hold_count > 1 OR d.read_until IS NULL THEN n.lock_strategy
                         ELSE 'read' END,
    acquired_at = CASE WHEN n.hold_count > 1 OR d.read_until IS NULL THEN n.acquired_at
                       ELSE statement_timestamp() END,
    lock_time = CASE WHEN n.hold_count > 1 OR d.read_until IS NULL THEN n.lock_time
                     ELSE statement_timestamp() END,
    lock_duration = CASE WHEN n.hold_count > 1 OR d.read_until IS NULL THEN n.lock_duration
        ELSE (extract(epoch FROM d.read_until - statement_timestamp()) * 1000000)::BIGINT END,
    expires_at = CASE WHEN n.hold_count > 1 THEN n.expires_at
                      WHEN d.read_until IS NULL THEN statement_timestamp()
                      ELSE d.read_until END,
    presence_key = CASE WHEN n.hold_count > 1 OR d.read_until IS NULL THEN n.presence_key
                        ELSE NULL END,
    hold_count = CASE WHEN n.hold_count > 1 THEN n.hold_count - 1
                      WHEN d.read_until IS NULL THEN 0
                      ELSE 1 END
FROM d
WHERE n.lock_key = :key
  AND n.lock_owner = :owner
  AND n.fencing_token = :token
  AND n.lock_strategy = 'write'
  AND n.locked
  AND n.expires_at - statement_timestamp() > INTERVAL '0'
