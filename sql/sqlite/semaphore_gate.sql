-- First in an acquisition's transaction: writes (to itself) the semaphore's row, so
-- that the transaction holds the database's write lock from its first statement
-- (never upgrading a read lock, which could deadlock with another process), and
-- answers its N (none when the semaphore is not recorded). SQLite runs one writer at
-- a time: the acquisitions of a semaphore take their permits one at a time.
UPDATE "{table}_semaphores" SET permits = permits WHERE name = :key RETURNING permits
