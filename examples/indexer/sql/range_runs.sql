-- Who indexed the range, on which attempt.
SELECT worker, attempt FROM index_runs WHERE range_from = $1 ORDER BY indexed_at
