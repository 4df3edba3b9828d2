-- Queues failed job $1 again; $2 forces a replay that would run out of order.
SELECT ordered_job_replay($1, $2);
