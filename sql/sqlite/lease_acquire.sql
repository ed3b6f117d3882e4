-- Shared by the lease and the insert strategy (:strategy names which is recorded);
-- they differ at release: a lease row stays, an insert row is deleted.
-- Take the lease on :key for :owner when it is free, expired, or already ours with the
-- same strategy (then the hold count grows and the token stays). One statement: no row
-- comes back when another owner holds a live lease, nor when we hold it with the other
-- strategy. Times are microseconds since the Unix epoch.
-- A row an at-least hold keeps (LockRequest::at_least: released, hold_count 0, locked
-- until its hold ends) is busy for its own owner too: only a row with holds is re-entered.
-- A fresh row's token is one above the floor of deleted rows' tokens (see the migration);
-- an existing row's token grows by one on every new grant.
-- Presence (LockerBuilder::presence): SQLite keeps no marker in the table. :gone names
-- an owner whose presence marker (a file lock beside the database) the caller found
-- free and holds while this statement runs: its process died, and its live lease is
-- taken too, as a new grant (a new token, one hold). '' for none, which never matches
-- the owner '' of a name held in shared mode (rw_mark.sql). Not a row an at-least
-- hold keeps (no hold): that one lapses at its expiry whatever became of the process
-- that released it.
--
-- The fair strategy (:strategy 'fair') takes a key this way only while no live fair
-- waiter is queued for it: one statement for a fair lock nobody waits for, and never
-- a grant past a waiter. SQLite runs one writer at a time and a writer reads the
-- latest commit, so the queue is read as it stands (the servers keep a flag on the
-- row instead). A live hold of the owner's own is re-entered all the same. A fair
-- attempt that finds waiters queued joins the queue (fair/steps.rs). The insert's
-- own test only keeps a fresh row from being made past waiters (a row another
-- strategy deleted); a row that is there is decided by the update's.
INSERT INTO "{table}" AS l
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token)
SELECT :key, :owner, :strategy, 1, n.now, n.now, :ttl_us, n.now + :ttl_us, 1,
       (SELECT floor + 1 FROM "{table}_fence" WHERE id = 1)
FROM (SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) AS now) AS n
WHERE :strategy <> 'fair'
   OR NOT EXISTS (SELECT 1 FROM "{table}_queue" AS q
                  WHERE q.lock_key = :key AND q.granted_token IS NULL AND q.expires_at > n.now)
   OR EXISTS (SELECT 1 FROM "{table}" AS r WHERE r.lock_key = :key)
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
WHERE (excluded.lock_strategy <> 'fair'
       OR NOT EXISTS (SELECT 1 FROM "{table}_queue" AS q
                      WHERE q.lock_key = excluded.lock_key AND q.granted_token IS NULL
                        AND q.expires_at > excluded.lock_time)
       OR (l.locked AND l.lock_owner = excluded.lock_owner AND l.lock_strategy = 'fair'
           AND l.hold_count > 0 AND l.expires_at > excluded.lock_time))
  AND (NOT l.locked
   OR l.expires_at <= excluded.lock_time
   OR (l.lock_owner = excluded.lock_owner AND l.lock_strategy = excluded.lock_strategy
       AND l.hold_count > 0)
   OR (l.lock_owner = :gone AND :gone <> '' AND l.hold_count > 0))
RETURNING lock_owner, fencing_token, expires_at AS expires_us, hold_count, lock_strategy
