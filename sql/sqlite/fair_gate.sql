-- The fair strategy's steps run in a transaction that first writes (to itself) the
-- fence row: SQLite runs one writer at a time, so the step holds the database's write
-- lock from its first statement, never upgrading a read lock (which could deadlock
-- with another process), and the fair steps run one at a time with every other
-- write. One matched row.
UPDATE "{table}_fence" SET floor = floor WHERE id = 1
