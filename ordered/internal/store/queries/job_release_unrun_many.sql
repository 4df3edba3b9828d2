-- Gives back claims of a batch that never ran ($1 ids, $2 their claim versions, same
-- positions), their attempts not counted, as job_release_unrun does one: queued again, the
-- lease cleared, the mark of a start (attempted_at) kept only if an earlier attempt left one.
-- The claim versions stay raised, so the claims given back are fenced. Rows: the jobs given
-- back; a claim not returned was lost, and nothing changed for it.
-- $1 ids       bigint[]  the jobs
-- $2 versions  bigint[]  their claim versions, same positions
UPDATE ordered_jobs AS j
SET status = 'queued',
    attempts = j.attempts - 1,
    lease_until = NULL,
    attempted_at = CASE WHEN j.attempts > 1 OR j.last_error IS NOT NULL THEN j.attempted_at END
FROM unnest($1::bigint[], $2::bigint[]) AS c(id, version)
WHERE j.id = c.id AND j.claim_version = c.version
  AND j.status = 'running' AND j.lease_until > clock_timestamp()
RETURNING j.id;
