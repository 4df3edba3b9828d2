-- The backfill's checks over the plan's $1 ranges of $2 blocks.
WITH plan AS (
    SELECT i * $2::bigint AS range_from FROM generate_series(0, $1::bigint - 1) AS i
), runs AS (
    SELECT range_from, count(*) AS n FROM index_runs GROUP BY range_from
)
SELECT
    (SELECT count(*) FROM plan WHERE range_from NOT IN (SELECT range_from FROM runs)),
    (SELECT count(*) FROM runs WHERE n > 1),
    (SELECT count(*) FROM runs WHERE range_from NOT IN (SELECT range_from FROM plan)),
    (SELECT coalesce(sum(events), 0) FROM index_runs),
    (SELECT count(*) FROM block_events)
