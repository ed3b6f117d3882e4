-- Records the semaphore :key with :permits permits, unless it is recorded already:
-- the first caller fixes N, and sqlock never changes it.
INSERT INTO "{table}_semaphores" (name, permits)
VALUES (:key, :permits)
ON CONFLICT (name) DO NOTHING
