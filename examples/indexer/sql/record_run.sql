-- Record that this claim indexed the range, with the events the range has.
INSERT INTO index_runs (range_from, range_to, events, worker, attempt, claim_version)
SELECT $1, $2, count(*), $3, $4, $5 FROM block_events WHERE block BETWEEN $1 AND $2
