-- What became of a completion batch whose answer was lost ($1 ids, $2 their claim versions,
-- $3 their keys, same positions), in the rows of job_complete_many.sql: if it committed, the
-- jobs it completed (completed true) and the next jobs it claimed that nothing has written
-- since; no rows if it did not commit, or completed nothing. A row keeps the transaction that
-- wrote it as its xmin: a job the batch completed (done, at the version the batch held) for
-- good, a next job it claimed until a renewal, a release or another claim writes it again.
WITH batch AS (
    SELECT j.xmin AS xid
    FROM unnest($1::bigint[], $2::bigint[]) AS c(id, version)
    JOIN ordered_jobs AS j ON j.id = c.id
    WHERE j.status = 'done' AND j.claim_version = c.version
    LIMIT 1
)
SELECT true AS completed, j.id, NULL::text AS key, NULL::bigint AS seq, NULL::text AS kind,
       NULL::jsonb AS payload, NULL::integer AS attempts, NULL::integer AS max_attempts,
       j.claim_version, NULL::timestamptz AS lease_until, NULL::timestamptz AS created_at,
       NULL::timestamptz AS available_at, NULL::timestamptz AS attempted_at,
       NULL::text AS last_error
FROM batch
JOIN ordered_jobs AS j ON j.id = ANY ($1::bigint[]) AND j.status = 'done' AND j.xmin = batch.xid
UNION ALL
SELECT false, j.id, j.key, j.seq, j.kind, j.payload, j.attempts, j.max_attempts,
       j.claim_version, j.lease_until, j.created_at, j.available_at, j.attempted_at,
       j.last_error
FROM batch
JOIN ordered_jobs AS j ON j.key = ANY ($3::text[]) AND j.status = 'running' AND j.xmin = batch.xid;
