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
leads AS (
    -- the running claims given back, with the batches they led, as before this statement
    SELECT j.id, j.key, j.seq, j.batch_to
    FROM unnest($1::bigint[], $2::bigint[]) AS c(id, version)
    JOIN ordered_jobs AS j ON j.id = c.id
    CROSS JOIN clock
    WHERE j.claim_version = c.version AND j.status = 'running' AND j.lease_until > clock.t
), released AS (
    UPDATE ordered_jobs AS j
    SET status = 'queued',
        attempts = j.attempts - 1,
        lease_until = NULL,
        attempted_at = CASE WHEN j.attempts > 1 OR j.last_error IS NOT NULL THEN j.attempted_at END
    FROM unnest($1::bigint[], $2::bigint[]) AS c(id, version), clock
    WHERE j.id = c.id AND j.claim_version = c.version
      AND j.status = 'running' AND j.lease_until > clock.t
    RETURNING j.id
), later AS (
    -- the later jobs of batches, and the live batch that covers each: one given back with
    -- them, or another running head of the key
    SELECT m.id, m.key, m.seq, coalesce(l.id, h.id) AS lead_id, l.id IS NULL AS cut
    FROM unnest($1::bigint[], $2::bigint[]) AS c(id, version)
    JOIN ordered_jobs AS m ON m.id = c.id
    CROSS JOIN clock
    LEFT JOIN leads AS l ON l.key = m.key AND m.seq > l.seq AND m.seq <= l.batch_to
    LEFT JOIN LATERAL (
        SELECT h.id FROM ordered_jobs AS h
        WHERE l.id IS NULL AND h.key = m.key AND h.head AND h.status = 'running'
          AND h.lease_until > clock.t AND m.seq > h.seq AND m.seq <= h.batch_to
          AND h.id <> ALL ($1::bigint[])
        LIMIT 1) AS h ON true
    WHERE m.claim_version = c.version - 1 AND m.status = 'queued' AND NOT m.head
      AND (l.id IS NOT NULL OR h.id IS NOT NULL)
), cuts AS (
    -- a batch cut back keeps what lies below its first job given back: it ends at the last
    -- open job there (or its head), so no hole below the cut is left inside it
    SELECT h.id, h.key, h.batch_to AS old_to,
           coalesce((SELECT max(o.seq) FROM ordered_jobs AS o
                     WHERE o.key = h.key AND o.status IN ('queued', 'running', 'blocked')
                       AND o.seq > h.seq AND o.seq < c.seq), h.seq) AS new_to
    FROM (SELECT l.lead_id, min(l.seq) AS seq FROM later AS l WHERE l.cut GROUP BY l.lead_id) AS c
    JOIN ordered_jobs AS h ON h.id = c.lead_id
), cut AS (
    UPDATE ordered_jobs AS h
    SET batch_to = c.new_to
    FROM cuts AS c
    WHERE h.id = c.id
    RETURNING h.id
), ended AS (
    SELECT ordered_batch_end(l.key, l.seq, l.batch_to, false, NULL, NULL, NULL) FROM leads AS l
    UNION ALL
    SELECT ordered_batch_end(c.key, c.new_to, c.old_to, false, NULL, NULL, NULL) FROM cuts AS c
)
SELECT r.id FROM released AS r
UNION ALL
SELECT l.id FROM later AS l
WHERE (SELECT count(*) FROM ended) >= 0;
