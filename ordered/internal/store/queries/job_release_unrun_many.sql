-- Gives back claims of a batch that never ran ($1 ids, $2 their claim versions, same
-- positions), their attempts not counted, as job_release_unrun does one: queued again, the
-- lease cleared, the mark of a start (attempted_at) kept only if an earlier attempt left one.
-- A later job of a batch, still queued (ordered_jobs_extend), is given back by ending the
-- batch that covers it before it: one given back here ends where it stood, another running
-- head's is cut back to the last job it keeps. Either way the jobs after that point get
-- their claim versions raised (ordered_batch_end), so every claim given back is fenced. Rows:
-- the jobs given back; a claim not returned was lost, and nothing changed for it.
-- $1 ids       bigint[]  the jobs
-- $2 versions  bigint[]  their claim versions, same positions
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS t),
claims AS MATERIALIZED (
    SELECT c.id, c.version, j.key, j.seq, j.claim_version, j.status, j.last_error
    FROM unnest($1::bigint[], $2::bigint[]) AS c(id, version)
    CROSS JOIN LATERAL (SELECT j.* FROM ordered_jobs AS j WHERE j.id = c.id OFFSET 0) AS j
), heads AS MATERIALIZED (
    -- the running heads of the claims' keys, as before this statement
    SELECT h.key, h.job_id, h.seq, h.claim_version, h.batch_to,
           EXISTS (SELECT 1 FROM claims AS c WHERE c.id = h.job_id AND c.version = h.claim_version) AS given_back
    FROM (SELECT DISTINCT c.key FROM claims AS c) AS k
    CROSS JOIN LATERAL (SELECT h.* FROM ordered_heads AS h WHERE h.key = k.key OFFSET 0) AS h
    CROSS JOIN clock
    WHERE h.lease_until > clock.t
), released AS (
    UPDATE ordered_heads AS h
    SET state = 'queued',
        attempts = h.attempts - 1,
        lease_until = NULL,
        batch_to = NULL,
        attempted_at = CASE WHEN h.attempts > 1 OR c.last_error IS NOT NULL THEN h.attempted_at END
    FROM heads AS l, claims AS c, clock
    WHERE l.given_back AND h.key = l.key AND c.id = l.job_id
      AND h.job_id = l.job_id AND h.claim_version = l.claim_version
      AND h.lease_until > clock.t
    RETURNING h.job_id
), later AS (
    -- the later jobs of batches, and the live batch that covers each: one given back with
    -- them, or one that goes on and is cut
    SELECT c.id, c.key, c.seq, l.job_id AS lead_id, NOT l.given_back AS cut
    FROM claims AS c
    JOIN heads AS l ON l.key = c.key AND c.seq > l.seq AND c.seq <= l.batch_to
    WHERE c.claim_version = c.version - 1 AND c.status = 'queued'
), cuts AS (
    -- a batch cut back keeps what lies below its first job given back: it ends at the last
    -- open job there (or its head), so no hole below the cut is left inside it
    SELECT h.key, h.batch_to AS old_to,
           coalesce((SELECT max(o.seq) FROM ordered_jobs AS o
                     WHERE o.key = h.key AND o.status = 'queued'
                       AND o.seq > h.seq AND o.seq < c.seq), h.seq) AS new_to
    FROM (SELECT l.key, min(l.seq) AS seq FROM later AS l WHERE l.cut GROUP BY l.key) AS c
    JOIN heads AS h ON h.key = c.key
), cut AS (
    UPDATE ordered_heads AS h
    SET batch_to = CASE WHEN c.new_to > h.seq THEN c.new_to END
    FROM cuts AS c
    WHERE h.key = c.key
    RETURNING h.key
), ended AS (
    SELECT ordered_batch_end(l.key, l.seq, l.batch_to, false, NULL, NULL, NULL)
    FROM heads AS l WHERE l.given_back
    UNION ALL
    SELECT ordered_batch_end(c.key, c.new_to, c.old_to, false, NULL, NULL, NULL) FROM cuts AS c
)
SELECT r.job_id FROM released AS r
UNION ALL
SELECT l.id FROM later AS l
WHERE (SELECT count(*) FROM ended) >= 0;
