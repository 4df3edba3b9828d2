-- Renews the one lease of a batch's claims ($1 ids, $2 their claim versions, same positions)
-- by $3 from now, for the claims still live. The lease is the head's; a later job of a batch,
-- still queued, holds its claim through the head renewed with it that covers it
-- (ordered_jobs_extend). Rows: the jobs renewed; a claim not returned was lost.
-- $1 ids       bigint[]  the jobs
-- $2 versions  bigint[]  their claim versions, same positions
-- $3 lease     interval  the new lease, from now
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS t),
renewed AS (
    UPDATE ordered_heads AS h
    SET lease_until = ordered_lease_end(clock.t, $3::interval)
    FROM unnest($1::bigint[], $2::bigint[]) AS c(id, version)
    CROSS JOIN LATERAL (SELECT j.key FROM ordered_jobs AS j WHERE j.id = c.id OFFSET 0) AS j,
         clock
    WHERE h.key = j.key AND h.job_id = c.id AND h.claim_version = c.version
      AND h.lease_until > clock.t
    RETURNING h.job_id, h.key, h.seq, h.batch_to
)
SELECT r.job_id FROM renewed AS r
UNION ALL
SELECT m.id
FROM unnest($1::bigint[], $2::bigint[]) AS c(id, version)
JOIN ordered_jobs AS m ON m.id = c.id
JOIN renewed AS r ON r.key = m.key AND m.seq > r.seq AND m.seq <= r.batch_to
WHERE m.claim_version = c.version - 1 AND m.status = 'queued';
