-- First in an acquisition's transaction: locks the semaphore's row until the
-- transaction ends, so that the acquisitions of one semaphore take their permits one
-- at a time, and answers its N (none when the semaphore is not recorded). Another
-- acquisition holds the row for three statements at most: a second at most of
-- waiting, then contention (tried again).
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
SELECT permits FROM `{table}_semaphores` WHERE name = :key FOR UPDATE
