-- A handoff that finds no live waiter queued for the key clears its row's queued flag
-- (see the migration), in its transaction, under the key's gate, which every join
-- takes: a fair lock nobody waits for is then taken and given back in one statement
-- each (lease_acquire, fair_release).
UPDATE "{table}" SET queued = FALSE WHERE lock_key = :key AND queued
