-- A read's mark of the read-write lock's name :key, in the read's transaction, right
-- after the read hold was granted (rw_read.sql): the name's own row is held in shared
-- mode by reads, so that every other acquisition of the name, of any primitive, finds
-- it held by another owner and busy. In shared mode the row has no owner (''),
-- lock_strategy 'read', counts the read holds in hold_count, and expires no sooner
-- than any of them:
-- - free, missing or expired: taken in shared mode, one hold, a new fencing token;
-- - held by reads: :count more holds (1 for a new read hold, 0 for a re-entry), its
--   expiry pushed to at least :ttl_us from now, and no sooner than the read hold's
--   (read from its row: the hold's statement read the clock a moment before, and a
--   clock stepped back between the two must not leave the name short of the hold);
-- - held by :owner as the write side (recorded 'write', with holds: a downgrade):
--   left so, its expiry pushed as well, and its presence marker dropped, so that no
--   presence takeover frees the name while the read lives (the write's release leaves
--   the name to the read, rw_release.sql);
-- - anything else (a lock of any owner, this one's included; a semaphore's
--   permits): left as it is.
-- One row comes back, 1, when the name is marked; none otherwise, and the caller rolls
-- the read back (busy).
-- Sent under the key's gate, held shared (rw_gate.sql): no exclusive grant of the name
-- commits meanwhile; another read's mark of the name waits for this row's lock.
INSERT INTO "{table}" AS n
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token, presence_key)
SELECT :key, '', 'read', TRUE, statement_timestamp(), statement_timestamp(), :ttl_us,
       greatest(statement_timestamp() + :ttl_us * INTERVAL '1 microsecond',
                (SELECT h.expires_at FROM "{table}" AS h
                 WHERE h.lock_key = :key || '@read:' || :owner)),
       1, nextval('"{table}_fence_seq"'), NULL
ON CONFLICT (lock_key) DO UPDATE SET
    fencing_token = CASE WHEN NOT n.locked OR n.expires_at <= EXCLUDED.lock_time
        THEN greatest(nextval('"{table}_fence_seq"'), n.fencing_token + 1)
        ELSE n.fencing_token END,
    hold_count = CASE WHEN NOT n.locked OR n.expires_at <= EXCLUDED.lock_time THEN 1
        WHEN n.lock_owner = '' THEN n.hold_count + CAST(:count AS INTEGER)
        ELSE n.hold_count END,
    acquired_at = CASE WHEN NOT n.locked OR n.expires_at <= EXCLUDED.lock_time
        THEN EXCLUDED.acquired_at ELSE n.acquired_at END,
    lock_owner = CASE WHEN NOT n.locked OR n.expires_at <= EXCLUDED.lock_time
        THEN '' ELSE n.lock_owner END,
    lock_strategy = CASE WHEN NOT n.locked OR n.expires_at <= EXCLUDED.lock_time
        THEN 'read' ELSE n.lock_strategy END,
    expires_at = CASE WHEN NOT n.locked OR n.expires_at <= EXCLUDED.lock_time
        THEN EXCLUDED.expires_at ELSE greatest(n.expires_at, EXCLUDED.expires_at) END,
    lock_duration = greatest(:ttl_us,
        (extract(epoch FROM n.expires_at - EXCLUDED.lock_time) * 1000000)::BIGINT),
    lock_time = EXCLUDED.lock_time,
    locked = TRUE,
    presence_key = NULL
WHERE NOT n.locked
   OR n.expires_at <= EXCLUDED.lock_time
   OR (n.lock_owner = '' AND n.lock_strategy = 'read')
   OR (n.lock_owner = :owner AND n.lock_strategy = 'write' AND n.hold_count > 0)
RETURNING 1::BIGINT
