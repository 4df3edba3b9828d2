-- The claim: one auto-committed statement that takes up to $1 jobs and leases them for $2.
--
-- Two kinds of candidate, recovered leases first:
--   * a running job whose lease expired and that has attempts left (its worker crashed or
--     stalled; exhausted ones are failed by maintenance, never claimed);
--   * a ready head: the lowest open job of its key, queued, due (ordered_jobs_ready holds one
--     row per key at most, so a key's backlog is never scanned).
-- Both carry the same NOT EXISTS guard: no open job of the same key with a lower seq. It always
-- applies, also to recovery. FOR UPDATE SKIP LOCKED: a candidate locked by another claim (or by
-- an enqueue that is demoting it) is skipped, never waited for; if it changed since this
-- statement's snapshot, PostgreSQL re-checks head and status on the new row version.
WITH recovered AS (
    SELECT j.id
    FROM ordered_jobs AS j
    WHERE j.status = 'running'
      AND j.lease_until <= statement_timestamp()
      AND j.attempts < j.max_attempts
      AND NOT EXISTS (
          SELECT 1 FROM ordered_jobs AS e
          WHERE e.key = j.key AND e.seq < j.seq
            AND e.status IN ('queued', 'running', 'blocked'))
    ORDER BY j.lease_until
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), ready AS (
    SELECT j.id
    FROM ordered_jobs AS j
    WHERE j.head
      AND j.status = 'queued'
      AND j.available_at <= statement_timestamp()
      AND NOT EXISTS (
          SELECT 1 FROM ordered_jobs AS e
          WHERE e.key = j.key AND e.seq < j.seq
            AND e.status IN ('queued', 'running', 'blocked'))
    ORDER BY j.available_at, j.id
    LIMIT greatest($1 - (SELECT count(*) FROM recovered), 0)
    FOR UPDATE SKIP LOCKED
)
-- The candidates are handed over as an array, so the update finds them through the primary
-- key whatever the planner guesses of their number (a join here was planned as a hash join
-- over a sequential scan of the whole table).
UPDATE ordered_jobs AS j
SET status = 'running',
    attempts = j.attempts + 1,
    claim_version = j.claim_version + 1,
    lease_until = statement_timestamp() + $2::interval,
    attempted_at = statement_timestamp()
WHERE j.id = ANY (ARRAY(SELECT id FROM recovered UNION ALL SELECT id FROM ready))
RETURNING j.id, j.key, j.seq, j.kind, j.payload, j.attempts, j.max_attempts, j.claim_version,
          j.lease_until, j.created_at, j.available_at, j.attempted_at, j.last_error,
          j.id = ANY (ARRAY(SELECT id FROM recovered)) AS recovered;
