-- Done jobs counted by the minute they finished in, over the last $1, read through
-- ordered_jobs_finished. Archived jobs are gone and not counted.
-- $1 window  interval  how far back
SELECT date_trunc('minute', finished_at) AS minute, count(*)
FROM ordered_jobs
WHERE status = 'done' AND finished_at >= statement_timestamp() - $1::interval
GROUP BY 1
ORDER BY 1;
