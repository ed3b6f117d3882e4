-- A read hold's gate: the read-write lock's key's transaction-scoped advisory lock,
-- taken shared and without waiting. Readers share it; every other acquisition of the
-- key (a write, a lease of any strategy, a for-update holder for its whole
-- transaction) takes it exclusively, so a read's check and grant never run beside a
-- grant of the key. A row when taken, none when another transaction holds it
-- exclusively.
SELECT 1 WHERE pg_try_advisory_xact_lock_shared(hashtextextended(:key, hashtext('{table}')))
