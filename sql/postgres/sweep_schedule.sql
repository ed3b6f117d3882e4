-- Schedules the sweep procedure as the pg_cron job named after the table, replacing
-- one scheduled before under that name by the same user. A job's command is stored
-- text, so the server writes it from the bound integers (format's %s of an integer is
-- its digits) and the procedure name (%I quotes it); returns the job's id.
SELECT cron.schedule(
    '{table}_sweep',
    :schedule,
    format('CALL %I(%s, %s, %s)', '{table}_sweep',
           CAST(:limit AS integer), CAST(:grace_us AS bigint), CAST(:batches AS integer)))
