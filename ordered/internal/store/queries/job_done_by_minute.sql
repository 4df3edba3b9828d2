-- Done jobs counted by the minute they finished in, over the last $1. Archived jobs are gone
-- and not counted. No index covers finished_at (a completion writes it, and an index on it
-- would take the completion's write off its page), so this reads the whole table.
-- $1 window  interval  how far back
SELECT date_trunc('minute', finished_at) AS minute, count(*)
FROM ordered_jobs
WHERE status = 'done' AND finished_at >= statement_timestamp() - $1::interval
GROUP BY 1
ORDER BY 1;
