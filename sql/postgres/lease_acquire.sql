-- Shared by the lease and the insert strategy (:strategy names which is recorded);
-- they differ at release: a lease row stays, an insert row is deleted.
-- Take the lease on :key for :owner when it is free, expired, or already ours with the
-- same strategy (then the hold count grows and the token stays). One statement, one
-- round trip: no row comes back when another owner holds a live lease, nor when we hold
-- it with the other strategy (a key is held by one strategy at a time, and a re-entry
-- never changes the strategy it is held with). A row an at-least hold keeps
-- (LockRequest::at_least: released, hold_count 0, locked until its hold ends) is busy
-- for its own owner too: only a row with holds is re-entered.
--
-- The gate: the key's transaction-scoped advisory lock, taken without waiting. A
-- for-update holder keeps it for its whole transaction, so a lease or insert attempt
-- on a key held that way finds the gate closed and never waits on the holder's row
-- lock; another acquisition of the key holds it for one statement. A closed gate
-- answers one row with hold_count 0: "contended, try again", never a grant.
-- With the gate open, a fresh row's token is drawn under it, so a token drawn while
-- the insert waits for a row being deleted can never fall behind a grant made
-- meanwhile.
-- The token is drawn inside DO UPDATE, under the row lock, so tokens rise in grant order;
-- greatest() keeps them rising even past a token the sequence never issued (a restored
-- backup whose sequence lags, a row written by hand).
--
-- Presence (LockerBuilder::presence): :presence is the key of the acquiring handle's
-- presence marker, a session advisory lock (first key 1936813168) it keeps on a
-- connection of its own ('' for none). The lease records the marker only when a
-- session holds it as the statement runs (pg_try_advisory_xact_lock_shared fails):
-- a marker whose session ended is never recorded, and the lease is then a plain one.
-- The shared form lets two acquisitions of one handle try it at once without either
-- mistaking the other's try for a holder. What is recorded is the marker's key in the
-- low 32 bits and, in the high 32, a stamp of this server's lifetime (life: the low 32
-- bits of pg_postmaster_start_time() XOR pg_stat_bgwriter.stats_reset, in
-- microseconds): a restarted server, or a promoted standby, has another postmaster
-- start, and a server that restarted after a crash of one of its processes (the
-- postmaster stays, every session ends, restart_after_crash) has discarded its
-- statistics, which sets stats_reset anew. A marker recorded before is never trusted
-- (no session of the new lifetime holds it, which says nothing of its holder). An
-- operator's pg_stat_reset_shared() changes the stamp too, which only makes the
-- markers of before untrusted: their leases then last until their expiry. The marked
-- column says whether the marker was recorded.
-- A live lease of another owner is taken too when its row records a marker stamped
-- with this lifetime and no session holds that marker any more: the holder's process
-- died and the server ended its sessions. pg_try_advisory_xact_lock_shared succeeds
-- only then (the holder's session holds it exclusively), and keeps the marker until
-- this statement commits, so the holder cannot take it back meanwhile (a holder that
-- takes it back afterwards finds the lease taken). Shared, so that the holder's own
-- acquisition running meanwhile sees the marker as not held, and records none (an
-- exclusive hold of the taker's would look like the holder's session).
-- CASE keeps the order: the lock is tried only for a stamp of this lifetime. Such a
-- takeover is a new grant: a new token, one hold. A for-update row is never taken
-- this way (its holder keeps the key's gate anyway).
--
-- The fair strategy (:strategy 'fair') takes a key this way only while no fair waiter
-- is queued for it (queued, see the migration): one statement for a fair lock nobody
-- waits for, and never a grant past a waiter. ON CONFLICT reads the flag on the
-- row's latest version, under its lock, so a join committed before this statement
-- locked the row is seen by it. The queue's live places are read too, on the insert
-- path as on the update: a join that could not mark the row (a fenced transaction of
-- the holder's kept it locked) or whose row a sweep deleted is seen by its place,
-- committed before this statement began. A live hold of the owner's own is re-entered
-- all the same. A fair attempt that finds waiters queued joins the queue
-- (fair/steps.rs); one turned away on the insert path answers no row, as a busy key.
-- The insert path's test applies only to a key without a row (a row goes on to ON
-- CONFLICT, whose test is the one above): a candidate row filtered out never meets
-- the conflict, and the owner's own re-entry would be refused with it.
--
-- A fair attempt waits at most a millisecond on the key's row lock (patience; the
-- setting is the statement's own, which is sent alone, and lapses with it): a holder's
-- fenced transaction keeps the row shared-locked for as long as it writes (fence.sql),
-- and the attempt, which holds the key's gate, must not keep the queue's steps out
-- that long. A lock not granted in time fails the statement (lock_not_available), as
-- contention: the attempt joins the queue. The other strategies wait as before.
--
-- Busy: a live lease of another owner that records a marker of this lifetime comes
-- back as it stands in the statement's snapshot, with no hold and with the marker's
-- key as holder, so that the waiter can wait in the server for the moment that
-- marker is freed (marker_wait.sql); any other busy lease answers no row. A hint
-- only: a row changed since the snapshot just makes the waiter wait on a stale
-- marker until its next poll.
WITH gate AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock(hashtextextended(:key, hashtext('{table}'))) AS open
), patience AS MATERIALIZED (
    SELECT set_config('lock_timeout',
                      CASE WHEN :strategy = 'fair' THEN '1'
                           ELSE current_setting('lock_timeout') END,
                      true) AS setting
), life AS MATERIALIZED (
    SELECT ((CAST(extract(epoch FROM pg_postmaster_start_time()) * 1000000 AS BIGINT)
             # COALESCE(CAST(extract(epoch FROM (SELECT stats_reset FROM pg_stat_bgwriter))
                             * 1000000 AS BIGINT), 0))
            & 4294967295) << 32 AS stamp
), taken AS (
INSERT INTO "{table}" AS l
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token, presence_key)
SELECT :key, :owner, :strategy, TRUE, statement_timestamp(), statement_timestamp(), :ttl_us,
       statement_timestamp() + :ttl_us * INTERVAL '1 microsecond',
       1, nextval('"{table}_fence_seq"'),
       CASE WHEN NULLIF(:presence, '') IS NULL THEN NULL
            WHEN pg_try_advisory_xact_lock_shared(1936813168,
                                                  CAST(NULLIF(:presence, '') AS INTEGER))
            THEN NULL
            ELSE life.stamp | CAST(NULLIF(:presence, '') AS BIGINT) END
FROM gate, life, patience
WHERE gate.open
  AND (:strategy <> 'fair'
       OR EXISTS (SELECT 1 FROM "{table}" WHERE lock_key = :key)
       OR NOT EXISTS (SELECT 1 FROM "{table}_queue" AS q
                      WHERE q.lock_key = :key AND q.granted_token IS NULL
                        AND q.expires_at > statement_timestamp()))
ON CONFLICT (lock_key) DO UPDATE SET
    fencing_token = CASE
        WHEN l.locked AND l.lock_owner = EXCLUDED.lock_owner AND l.expires_at > EXCLUDED.lock_time
        THEN l.fencing_token
        ELSE greatest(nextval('"{table}_fence_seq"'), l.fencing_token + 1) END,
    hold_count = CASE
        WHEN l.locked AND l.lock_owner = EXCLUDED.lock_owner AND l.expires_at > EXCLUDED.lock_time
        THEN l.hold_count + 1
        ELSE 1 END,
    expires_at = CASE
        WHEN l.locked AND l.lock_owner = EXCLUDED.lock_owner AND l.expires_at > EXCLUDED.lock_time
        THEN greatest(l.expires_at, EXCLUDED.expires_at)
        ELSE EXCLUDED.expires_at END,
    acquired_at = CASE
        WHEN l.locked AND l.lock_owner = EXCLUDED.lock_owner AND l.expires_at > EXCLUDED.lock_time
        THEN l.acquired_at
        ELSE EXCLUDED.acquired_at END,
    lock_owner = EXCLUDED.lock_owner,
    lock_strategy = EXCLUDED.lock_strategy,
    locked = TRUE,
    lock_time = EXCLUDED.lock_time,
    lock_duration = EXCLUDED.lock_duration,
    presence_key = EXCLUDED.presence_key
WHERE (EXCLUDED.lock_strategy <> 'fair'
       OR (NOT l.queued
           AND NOT EXISTS (SELECT 1 FROM "{table}_queue" AS q
                           WHERE q.lock_key = :key AND q.granted_token IS NULL
                             AND q.expires_at > statement_timestamp()))
       OR (l.locked AND l.lock_owner = EXCLUDED.lock_owner AND l.lock_strategy = 'fair'
           AND l.hold_count > 0 AND l.expires_at > EXCLUDED.lock_time))
  AND (NOT l.locked
   OR l.expires_at <= EXCLUDED.lock_time
   OR (l.lock_owner = EXCLUDED.lock_owner AND l.lock_strategy = EXCLUDED.lock_strategy
       AND l.hold_count > 0)
   OR (l.presence_key IS NOT NULL
       AND l.lock_owner <> EXCLUDED.lock_owner
       AND l.lock_strategy <> 'for-update'
       AND CASE WHEN (l.presence_key & -4294967296) = (SELECT stamp FROM life)
                THEN pg_try_advisory_xact_lock_shared(1936813168,
                                               CAST(l.presence_key & 2147483647 AS INTEGER))
                ELSE FALSE END))
RETURNING
    l.lock_owner,
    l.fencing_token,
    (extract(epoch FROM l.expires_at) * 1000000)::BIGINT AS expires_us,
    l.hold_count,
    l.lock_strategy,
    CAST(CASE WHEN l.presence_key IS NULL THEN 0 ELSE 1 END AS BIGINT) AS marked
)
SELECT lock_owner, fencing_token, expires_us, hold_count, lock_strategy, marked,
       CAST(NULL AS TEXT) AS holder FROM taken
UNION ALL
SELECT '', 0, 0, 0, '', 0, NULL FROM gate WHERE NOT gate.open
UNION ALL
SELECT b.lock_owner, 0, 0, 0, b.lock_strategy, 0,
       CAST(b.presence_key & 2147483647 AS TEXT)
FROM "{table}" AS b, gate, life
WHERE gate.open AND NOT EXISTS (SELECT 1 FROM taken)
  AND b.lock_key = :key AND b.locked AND b.lock_owner <> :owner
  AND b.lock_strategy <> 'for-update'
  AND (b.presence_key & -4294967296) = life.stamp
