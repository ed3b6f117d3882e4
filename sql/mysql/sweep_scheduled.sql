-- Whether the event named after the table exists in this database.
SELECT COUNT(*) FROM information_schema.EVENTS
WHERE EVENT_SCHEMA = DATABASE() AND EVENT_NAME = '{table}_sweep'
