-- First in an acquisition's transaction: locks the semaphore's row until the
-- transaction ends, so that the acquisitions of one semaphore take their permits one
-- at a time, and answers its N (none when the semaphore is not recorded). Another
-- acquisition holds the row for three statements at most: waiting on it is short.
SELECT permits FROM "{table}_semaphores" WHERE name = :key FOR UPDATE
