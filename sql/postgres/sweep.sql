-- The sweeper: delete at most :limit rows that expired at least :grace_us ago, oldest
-- first. SKIP LOCKED passes over rows another transaction holds (a for-update lock's
-- above all), so a sweep never waits on a held lock, and the outer WHERE checks expiry
-- again on the row as it stands under the row lock, so a lease renewed or taken while
-- the sweep ran is never deleted. A row released this instant (its expiry is now)
-- already counts: the bound is inclusive, as acquisitions take a row whose expiry is
-- now. The for-update strategy's rows are its reusable lock rows and are never swept.
-- A row fair waiters are queued for (a live place in the queue) stays: it keeps a fair
-- newcomer from taking the key in one statement past them. A row whose queued flag
-- outlived every waiter (they died) goes, flag and all. A join under way marks the
-- row, which keeps it locked (fair_ensure.sql): SKIP LOCKED passes over it.
DELETE FROM "{table}"
WHERE lock_key IN (
        SELECT s.lock_key FROM "{table}" AS s
        WHERE s.expires_at <= statement_timestamp() - :grace_us * INTERVAL '1 microsecond'
          AND s.lock_strategy <> 'for-update'
          AND NOT EXISTS (SELECT 1 FROM "{table}_queue" AS q
                          WHERE q.lock_key = s.lock_key
                            AND q.expires_at > statement_timestamp())
        ORDER BY s.expires_at
        LIMIT :limit
        FOR UPDATE OF s SKIP LOCKED)
  AND expires_at <= statement_timestamp() - :grace_us * INTERVAL '1 microsecond'
