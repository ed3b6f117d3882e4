-- A handoff that finds no live waiter queued for the key clears its row's queued flag
-- (see the migration), in its transaction, under the key's gate, which every join
-- takes: a fair lock nobody waits for is then taken and given back in one statement
-- each (lease_acquire, fair_release).
-- No wait on a row lock (a for-update holder's): the flag is then left set, which
-- only sends the next fair acquisition and release through the queue, where it is
-- cleared.
SET STATEMENT innodb_lock_wait_timeout = 0 FOR
UPDATE `{table}` SET queued = FALSE WHERE lock_key = :key AND queued
