-- The queue's jobs by what they wait for. held: queued behind a blocked job of its key, so it
-- runs only after an operator replays or skips that job; pending: running, or queued and free
-- to run (now or after its delay).
WITH jobs AS (
    SELECT j.status,
           j.status = 'queued' AND EXISTS (
               SELECT 1 FROM ordered_jobs_now b
               WHERE b.key = j.key AND b.status = 'blocked' AND b.seq < j.seq) AS held
    FROM ordered_jobs_now j
)
SELECT count(*) FILTER (WHERE status = 'done')                       AS done,
       count(*) FILTER (WHERE held)                                  AS held,
       count(*) FILTER (WHERE status = 'running')                    AS running,
       count(*) FILTER (WHERE status = 'queued' AND NOT held)        AS queued
FROM jobs;
