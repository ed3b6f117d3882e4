-- A read hold's gate: the database's write lock, taken by a write that changes
-- nothing (SQLite runs one writing transaction at a time), so that the read's check
-- and grant read what every earlier grant committed. A row when taken.
UPDATE "{table}_fence" SET floor = floor WHERE id = 1 RETURNING 1
