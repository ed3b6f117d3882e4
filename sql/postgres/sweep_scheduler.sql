-- What scheduling the sweeper needs on PostgreSQL, read before anything is scheduled:
-- pg_cron's version in this database (NULL when its extension is not created here),
-- the database pg_cron runs its jobs from (NULL when pg_cron is not loaded, that is
-- not in shared_preload_libraries), this database, and whether the sweep procedure of
-- sqlock's migrations exists on the search path.
SELECT (SELECT extversion FROM pg_extension WHERE extname = 'pg_cron')::text AS version,
       current_setting('cron.database_name', true)::text AS cron_database,
       current_database()::text AS here,
       EXISTS (SELECT 1 FROM pg_proc
               WHERE proname = '{table}_sweep' AND prokind = 'p'
                 AND pg_function_is_visible(oid)) AS has_procedure
