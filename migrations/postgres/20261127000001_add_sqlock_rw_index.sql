-- sqlock: the index of read-write locks' rows (Locker::read_lock / write_lock) for
-- PostgreSQL.
--
-- A read-write lock named N keeps each owner's read hold in the row 'N@read:<owner>'
-- and each waiting writer's intent in 'N@write:<owner>'. A read looks for the name's
-- waiting writers (sql/postgres/rw_read.sql) and a writer counts the name's readers
-- (rw_readers.sql) by a range of this index: the keys between 'N@read:' and 'N@read;'
-- (';' follows ':'). The primary key cannot serve that range: it orders keys by the
-- database's collation, in which punctuation may sort apart from its byte order
-- (en_US.UTF-8 ignores it at the first level; ICU's root collation puts ';' before
-- ':'), so a range of it is no prefix test. This index orders keys byte by byte
-- (COLLATE "C") whatever the database's collation, so the range holds exactly the keys
-- that start with the prefix. It is partial: it holds only keys that contain
-- '@read:' or '@write:', so plain locks never write to it and it stays as small as
-- the read-write locks in use. The statements repeat its predicate word for word,
-- which lets the planner use it.
-- Built under a lock that holds the table's writes for the build, which reads the
-- whole table once. That lock waits for every transaction that has written to the
-- table (a for-update holder's lasts as long as its hold), and every write waits
-- behind it meanwhile: so it is waited for two seconds at most (within the migration's
-- transaction), and the migration fails rather than stall acquisitions and renewals;
-- run it again when no long hold is open. On a large, busy table the index can be made
-- beforehand with CREATE INDEX CONCURRENTLY and the same definition (check that it is
-- valid), and this then does nothing.
SET LOCAL lock_timeout = '2s';
CREATE INDEX IF NOT EXISTS "sqlock_locks_rw_idx" ON "sqlock_locks" ((lock_key COLLATE "C"))
    WHERE strpos(lock_key, '@read:') > 0 OR strpos(lock_key, '@write:') > 0;
