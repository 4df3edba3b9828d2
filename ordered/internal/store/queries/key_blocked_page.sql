-- A page of blocked keys in key order after ($1, $2), each with the blocked job that holds it and
-- how many open jobs of the key wait behind that job, counted up to $4 (a deep backlog is not
-- walked to the end).
-- $1 after_key   text     resume after this blocked job's (key, seq) (null: from the start)
-- $2 after_seq   bigint   with after_key
-- $3 limit       integer  at most this many
-- $4 count_upto  integer  stop counting a key's waiting jobs here
SELECT b.key, b.id, b.seq, b.kind, b.attempts, b.max_attempts, b.last_error, b.finished_at,
       w.n
FROM ordered_jobs AS b
CROSS JOIN LATERAL (
    SELECT count(*) AS n FROM (
        SELECT 1 FROM ordered_jobs AS o
        WHERE o.key = b.key AND o.seq > b.seq AND o.status IN ('queued', 'blocked')
        LIMIT $4) AS l
) AS w
WHERE b.failed_at IS NOT NULL AND b.status = 'blocked'
  AND ($1::text IS NULL OR (b.key, b.seq) > ($1, $2::bigint))
ORDER BY b.key, b.seq
LIMIT $3;
