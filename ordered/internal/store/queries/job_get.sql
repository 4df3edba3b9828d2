-- One job as it runs (ordered_jobs_now: a later job of a running batch as running), with its
-- lease left (null unless running) by the database's clock.
-- $1 id  bigint  the job
SELECT id, key, seq, kind, payload, status, head, attempts, max_attempts, claim_version,
       last_error, lease_until,
       extract(epoch FROM lease_until - statement_timestamp())::float8,
       available_at, run_at, created_at, attempted_at, finished_at, claimed_by
FROM ordered_jobs_now
WHERE id = $1;
