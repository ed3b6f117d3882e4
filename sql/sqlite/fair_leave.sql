-- A waiter leaves the queue: it took its grant up, gave up, or its place lapsed.
DELETE FROM "{table}_queue" WHERE ticket = :ticket AND lock_key = :key
