-- Runs in the job's transaction: the report is stored and the request done exactly when the
-- job completes.
UPDATE report_requests
SET status = 'done', result = $3, generated_no = nextval('report_generation'), done_at = now()
WHERE customer = $1 AND seq = $2 AND status = 'queued'
