-- The recorded semaphores, by name, with their N.
SELECT name, permits FROM "{table}_semaphores" ORDER BY name LIMIT :limit
