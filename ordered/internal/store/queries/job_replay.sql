-- Queues a failed job again (see ordered_job_replay in the schema).
-- $1 id     bigint   the failed job
-- $2 force  boolean  replay even if it runs out of order
SELECT ordered_job_replay($1, $2);
