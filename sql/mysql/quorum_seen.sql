-- A quorum lock's token as this database last saw one granted (sqlock::Quorum): the
-- highest quorum token recorded for :key, 0 for none. Read by a holder that won a
-- majority, on each database it holds, before it raises the token.
SELECT COALESCE(MAX(quorum_token), 0) FROM `{table}_quorum` WHERE lock_key = :key
