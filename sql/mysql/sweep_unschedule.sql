-- Removes the event named after the table, if there is one.
DROP EVENT IF EXISTS `{table}_sweep`
