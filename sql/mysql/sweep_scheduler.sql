-- What scheduling the sweeper needs on MariaDB, read before anything is scheduled:
-- whether the event scheduler runs, and whether the procedures of sqlock's migrations
-- exist in this database.
SELECT @@GLOBAL.event_scheduler AS scheduler,
       EXISTS (SELECT 1 FROM information_schema.ROUTINES
               WHERE ROUTINE_SCHEMA = DATABASE()
                 AND ROUTINE_NAME IN ('{table}_sweep', '{table}_sweep_every')
               HAVING COUNT(*) = 2) AS has_procedure
