-- Schedules the sweep procedure as the event named after the table, replacing one
-- scheduled before. An event's body is stored text and cannot take parameters, so the
-- migration's `{table}_sweep_every` procedure writes it from its typed arguments.
CALL `{table}_sweep_every`(:every_s, :limit, :grace_us, :batches)
