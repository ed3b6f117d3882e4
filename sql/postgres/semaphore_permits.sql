-- The N recorded for the semaphore :key, if it is recorded.
SELECT permits FROM "{table}_semaphores" WHERE name = :key
