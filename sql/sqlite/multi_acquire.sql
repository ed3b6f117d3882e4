-- A multi-lock's attempt: every key of :keys (a JSON array of distinct keys, sorted)
-- taken as a lease for :owner, all or none, in one statement. Each key is taken as
-- lease_acquire.sql takes one (free, expired, or already ours with the same strategy
-- and a hold), with the same token rules; a dead presence holder's lease is not taken
-- over (a multi-lock leaves presence aside). Times are microseconds since the Unix
-- epoch.
--
-- All or none: the statement inserts or takes over its keys only when none of them is
-- held by someone else (a live lock of another owner, of another strategy, or an
-- at-least hold), and then every one of them. SQLite runs one writing statement at a
-- time, and this one reads the table as it stands under that write lock, so what the
-- check found still holds when the keys are written: every key is written, or none.
-- No row comes back when a key is busy; otherwise one row per key, as it stands
-- afterwards.
INSERT INTO "{table}" AS l
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token)
SELECT k.value, :owner, :strategy, 1, n.now, n.now, :ttl_us, n.now + :ttl_us, 1,
       (SELECT floor + 1 FROM "{table}_fence" WHERE id = 1)
FROM json_each(:keys) AS k,
     (SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) AS now) AS n
WHERE NOT EXISTS (
    SELECT 1 FROM "{table}" AS b
    WHERE b.lock_key IN (SELECT value FROM json_each(:keys))
      AND b.locked AND b.expires_at > n.now
      AND NOT (b.lock_owner = :owner AND b.lock_strategy = :strategy AND b.hold_count > 0))
ORDER BY k.value
ON CONFLICT (lock_key) DO UPDATE SET
    fencing_token = CASE
        WHEN l.locked AND l.lock_owner = excluded.lock_owner AND l.expires_at > excluded.lock_time
        THEN l.fencing_token
        ELSE l.fencing_token + 1 END,
    hold_count = CASE
        WHEN l.locked AND l.lock_owner = excluded.lock_owner AND l.expires_at > excluded.lock_time
        THEN l.hold_count + 1
        ELSE 1 END,
    expires_at = CASE
        WHEN l.locked AND l.lock_owner = excluded.lock_owner AND l.expires_at > excluded.lock_time
        THEN max(l.expires_at, excluded.expires_at)
        ELSE excluded.expires_at END,
    acquired_at = CASE
        WHEN l.locked AND l.lock_owner = excluded.lock_owner AND l.expires_at > excluded.lock_time
        THEN l.acquired_at
        ELSE excluded.acquired_at END,
    lock_owner = excluded.lock_owner,
    lock_strategy = excluded.lock_strategy,
    locked = 1,
    lock_time = excluded.lock_time,
    lock_duration = excluded.lock_duration
WHERE NOT l.locked
   OR l.expires_at <= excluded.lock_time
   OR (l.lock_owner = excluded.lock_owner AND l.lock_strategy = excluded.lock_strategy
       AND l.hold_count > 0)
RETURNING lock_key, lock_owner, fencing_token, expires_at AS expires_us, hold_count,
          lock_strategy
