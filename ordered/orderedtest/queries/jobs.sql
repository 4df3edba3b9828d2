-- Every job's state, by key and seq.
SELECT key, seq, status, finished_at
FROM ordered_jobs_now
ORDER BY key, seq;
