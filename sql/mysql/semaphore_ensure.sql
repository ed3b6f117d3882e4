-- Records the semaphore :key with :permits permits, unless it is recorded already:
-- the first caller fixes N, and sqlock never changes it. Run on its own, before the
-- acquisition's transaction, so that the transaction finds the row to lock (and takes
-- no gap lock for a missing one).
INSERT IGNORE INTO `{table}_semaphores` (name, permits) VALUES (:key, :permits)
