-- Shared by the lease and the insert strategy (:strategy names which is recorded);
-- they differ at release: a lease row stays, an insert row is deleted.
-- Take the lease on :key for :owner when it is free, expired, or already ours with the
-- same strategy (then the hold count grows and the token stays). One statement, one
-- round trip; RETURNING shows the row as it stands afterwards, so the lease is ours
-- when lock_owner is :owner and lock_strategy is :strategy. A row we hold with the other
-- strategy is left as it was (a key is held by one strategy at a time, and a re-entry
-- never changes the strategy it is held with): it comes back with our owner and the
-- other strategy.
-- A row an at-least hold keeps (LockRequest::at_least: released, hold_count 0, locked
-- until its hold ends) is busy for its own owner too: only a row with holds is
-- re-entered, and "ours" below means our owner, our strategy and a hold. Such a row
-- comes back as it stands, with no hold: busy, never a grant.
--
-- MariaDB evaluates the assignments below from left to right and each one sees the
-- columns assigned before it, so the take test is made once, in the first, before any
-- column changes, and kept in @sqlock_take for the others: every assignment of the
-- statement sees the same answer, and while it is false nothing changes.
-- The token is drawn in the UPDATE part, under the row lock, so tokens rise in grant
-- order; GREATEST() keeps them rising even past a token the sequence never issued.
-- No wait on a row lock: a for-update holder keeps the key's row locked for its whole
-- transaction, and a lease or insert attempt must see that as held at once. With a
-- lock wait timeout of zero, a locked row fails the statement with
-- ER_LOCK_WAIT_TIMEOUT at once, which counts as contention: tried again, then busy.
-- The fence bucket is shared with other keys (1024 buckets) and held only for the
-- length of one statement: a bucket another acquisition holds is skipped (SKIP
-- LOCKED), which leaves nothing to insert or update and answers no row at all (a
-- held key answers its row), and the caller sends the statement again after a pause.
-- Never "busy" for a free key whose bucket was in use. A Galera node is sent this
-- statement without SKIP LOCKED (its replication does not bear it): there a bucket in
-- use fails the statement as a locked row does.
--
-- Presence (LockerBuilder::presence): :presence is the name of the acquiring handle's
-- presence marker, a GET_LOCK it keeps on a connection of its own ('' for none),
-- 'sqlock:<server_id>:<owner>'. The lease records it only when a connection holds it
-- as the statement runs (IS_USED_LOCK is not NULL; only the handle's own connections
-- ever take it): a marker whose connection ended is never recorded, and the lease is
-- then a plain one. The marked column says whether it was recorded.
-- A live lease of another owner is taken too when its row records a marker that no
-- connection holds any more (IS_USED_LOCK is NULL: the holder's process died and the
-- server ended its connections), and only on the server lifetime that recorded it: the
-- marker names this server (@@server_id: a promoted replica has an id of its own) and
-- the lease was taken after this server started. MariaDB keeps its start in whole
-- seconds and counts Uptime as the statement's start less that, both truncated: the
-- start lies in the second that begins at UTC_TIMESTAMP() (whole seconds) less Uptime,
-- so a lease taken a second after that was taken after the start, and one of a
-- lifetime before never is (a lease of the first second of a lifetime is not trusted
-- either, and waits for its expiry). UTC_TIMESTAMP(6) less Uptime would not do: with
-- the statement early in its second and the start late in its own, it falls up to a
-- second before the start.
-- A restarted server holds no name of before its start, which says nothing of their
-- holders. MariaDB evaluates AND from left to right and stops at the first false, so
-- Uptime is read only for a free marker. The row is locked meanwhile: a holder that takes its
-- marker back afterwards and renews finds the lease taken. Such a takeover is a new
-- grant: a new token, one hold. A for-update row is never taken this way.
-- The fair strategy (:strategy 'fair') takes a key this way only while no fair waiter
-- is queued for it (queued, see the migration): one statement for a fair lock nobody
-- waits for, and never a grant past a waiter. The update reads the flag on the row's
-- latest version, under its lock, so a join committed before this statement locked
-- the row is seen by it. The queue's live places are read too (a locking read: a place
-- being written fails the statement at once, as contention), on the insert path as
-- on the update: a join that could not mark the row (a fenced transaction of the
-- holder's kept it locked) is seen by its place. A key without a row whose queue has
-- live places gets a free row, with no hold: busy, never a grant. A live hold of the
-- owner's own is re-entered all the same. A fair attempt that finds waiters queued
-- joins the queue (fair/steps.rs).
-- A busy row of another owner that records a marker of this server answers that
-- marker as holder, so that the waiter can wait in the server for the moment it is
-- freed (marker_wait.sql); NULL otherwise.
SET STATEMENT innodb_lock_wait_timeout = 0 FOR
INSERT INTO `{table}`
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token, presence_key)
-- The key's fence bucket is locked first, so a fresh row's token is drawn after every
-- earlier grant of the key has committed (see the migration).
SELECT :key, :owner, :strategy,
       :strategy <> 'fair'
           OR NOT EXISTS (SELECT 1 FROM `{table}_queue` AS q
                          WHERE q.lock_key = :key AND q.granted_token IS NULL
                            AND q.expires_at > UTC_TIMESTAMP(6)),
       UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), :ttl_us,
       UTC_TIMESTAMP(6) + INTERVAL :ttl_us MICROSECOND,
       IF(:strategy <> 'fair'
              OR NOT EXISTS (SELECT 1 FROM `{table}_queue` AS q
                             WHERE q.lock_key = :key AND q.granted_token IS NULL
                               AND q.expires_at > UTC_TIMESTAMP(6)), 1, 0),
       NEXTVAL(`{table}_fence_seq`),
       IF(IS_USED_LOCK(NULLIF(:presence, '')) IS NULL, NULL, :presence)
FROM `{table}_fence`
WHERE bucket = CRC32(:key) % 1024
FOR UPDATE SKIP LOCKED
ON DUPLICATE KEY UPDATE
    fencing_token = IF((@sqlock_take := (
            (VALUES(lock_strategy) <> 'fair'
             OR (NOT queued
                 AND NOT EXISTS (SELECT 1 FROM `{table}_queue` AS q
                                 WHERE q.lock_key = :key
                                   AND q.granted_token IS NULL
                                   AND q.expires_at > UTC_TIMESTAMP(6)))
             OR (locked AND lock_owner = VALUES(lock_owner) AND lock_strategy = 'fair'
                 AND hold_count > 0 AND expires_at > VALUES(lock_time)))
            AND ((presence_key IS NOT NULL
                  AND lock_owner <> VALUES(lock_owner) AND lock_strategy <> 'for-update'
                  AND IS_USED_LOCK(presence_key) IS NULL
                  AND SUBSTRING_INDEX(SUBSTRING_INDEX(presence_key, ':', 2), ':', -1)
                      = CAST(@@server_id AS CHAR)
                  AND acquired_at >= UTC_TIMESTAMP() + INTERVAL 1 SECOND - INTERVAL (SELECT VARIABLE_VALUE
                      FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'UPTIME') SECOND)
                 OR NOT locked OR expires_at <= VALUES(lock_time)
                 OR (lock_owner = VALUES(lock_owner) AND lock_strategy = VALUES(lock_strategy)
                     AND hold_count > 0)))),
                       IF(locked AND lock_owner = VALUES(lock_owner) AND expires_at > VALUES(lock_time),
                          fencing_token, GREATEST(NEXTVAL(`{table}_fence_seq`), fencing_token + 1)),
                       fencing_token),
    hold_count = IF(@sqlock_take,
                    IF(locked AND lock_owner = VALUES(lock_owner) AND expires_at > VALUES(lock_time),
                       hold_count + 1, 1),
                    hold_count),
    -- hold_count is more than one from here on for a re-entry, which keeps the later
    -- of the two expiries and the first acquired_at.
    expires_at = IF(@sqlock_take,
                    IF(hold_count > 1, GREATEST(expires_at, VALUES(expires_at)), VALUES(expires_at)),
                    expires_at),
    acquired_at = IF(@sqlock_take,
                     IF(hold_count > 1, acquired_at, VALUES(acquired_at)),
                     acquired_at),
    lock_time = IF(@sqlock_take, VALUES(lock_time), lock_time),
    lock_duration = IF(@sqlock_take, VALUES(lock_duration), lock_duration),
    lock_strategy = IF(@sqlock_take, VALUES(lock_strategy), lock_strategy),
    lock_owner = IF(@sqlock_take, VALUES(lock_owner), lock_owner),
    presence_key = IF(@sqlock_take, VALUES(presence_key), presence_key),
    locked = IF(@sqlock_take, TRUE, locked)
RETURNING
    lock_owner,
    fencing_token,
    TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', expires_at) AS expires_us,
    -- A row left as it stands whose lease has lapsed answers no hold: busy, never a
    -- grant (a fair attempt's own lapsed hold, with waiters queued). A grant's expiry
    -- always lies ahead of the statement's time, which UTC_TIMESTAMP(6) is.
    IF(expires_at > UTC_TIMESTAMP(6), hold_count, 0) AS hold_count,
    lock_strategy,
    CAST(presence_key IS NOT NULL AS SIGNED) AS marked,
    IF(lock_owner <> :owner AND locked AND hold_count > 0 AND presence_key IS NOT NULL
       AND lock_strategy <> 'for-update'
       AND SUBSTRING_INDEX(SUBSTRING_INDEX(presence_key, ':', 2), ':', -1)
           = CAST(@@server_id AS CHAR),
       presence_key, NULL) AS holder
