-- Of the plan's $1 ranges of $2 blocks: how many are indexed, and the watermark, the first
-- block of the lowest range not indexed (every block below it is).
SELECT (SELECT count(DISTINCT range_from) FROM index_runs),
       coalesce(min(i * $2::bigint), $1::bigint * $2::bigint)
FROM generate_series(0, $1::bigint - 1) AS i
WHERE NOT EXISTS (SELECT 1 FROM index_runs WHERE range_from = i * $2::bigint)
