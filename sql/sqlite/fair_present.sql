-- Presence (LockerBuilder::presence): SQLite keeps no marker in the table. A holder's
-- presence is its marker file beside the database, found by its owner: a handoff that
-- finds the lock held asks the holder's file (fair.rs), as lease_acquire's caller
-- does. So a fair grant has nothing to record when it is taken up, and this statement,
-- which changes nothing, is never sent (Backend::MARKERS_IN_FILES); it is here because
-- every server has the fair strategy's statements.
SELECT 0 WHERE :key IS NULL AND :owner IS NULL AND :token IS NULL AND :presence IS NULL
