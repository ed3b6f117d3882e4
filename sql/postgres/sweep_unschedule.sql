-- Removes the pg_cron job named after the table that this user scheduled; a row for
-- each job removed.
SELECT cron.unschedule(jobid) FROM cron.job
WHERE jobname = '{table}_sweep' AND username = current_user
