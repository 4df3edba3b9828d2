-- The claim moves into a function, so that its plan no longer depends on the statistics of the
-- moment. A queue's statistics are nearly always stale: ANALYZE sees one instant of a table
-- whose ready heads come and go within milliseconds. Two plans measured on this schema:
--
-- * Analysed with a 1,000,000-job backlog behind one running head (no ready head in the
--   sample), then given 1,000 ready keys: the planner expected one ready head, read all 1,000
--   through ordered_jobs_heads, ran the guard for each and sorted them; 3,486 buffers for a
--   claim of 20 jobs, against 537 through ordered_jobs_ready. Every claim paid for every ready
--   key: a drain of the other keys ran at 0.66 to 0.8 of its rate without the backlog.
-- * Analysed drained (only finished jobs), then given 2,000 ready keys: the planner expected
--   no open job and made the guard a join that read the whole of ordered_jobs_open for each
--   candidate; 57,606 buffers for a claim of 20.
--
-- One fence, independent of any estimate: the function forbids sorts (enable_sort = off).
-- * The oldest ready heads can then only be had by walking ordered_jobs_ready (available_at,
--   id) in order and stopping after the jobs taken; expired leases, ordered_jobs_leased.
-- * The guard reads the key's lowest open job (ORDER BY seq LIMIT 1), which without a sort
--   only a probe of ordered_jobs_open (key, seq) with the candidate's key as its condition
--   can give, and checks that it is not below the candidate: the same rule as before, no
--   open job of the key with a lower seq. Written as a plain NOT EXISTS it could become a
--   join over the whole index, as above; kept out of joins (OFFSET 0), the planner, costing
--   it as a search for one of the thousands of open jobs it expected, chose a sequential
--   scan of the table for each candidate (7,125 buffers for 20).
--
-- The statement is otherwise the one in ordered/internal/store/queries/job_claim_many.sql
-- before this version; that file now calls this function.

-- ordered_jobs_claim takes up to p_limit jobs and leases them for p_lease: one statement, one
-- auto-committed transaction.
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
CREATE FUNCTION ordered_jobs_claim(p_limit integer, p_lease interval)
RETURNS TABLE (id bigint, key text, seq bigint, kind text, payload jsonb, attempts integer,
               max_attempts integer, claim_version bigint, lease_until timestamptz,
               created_at timestamptz, available_at timestamptz, attempted_at timestamptz,
               last_error text, recovered boolean)
LANGUAGE plpgsql
SET enable_sort = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH recovered AS (
        SELECT j.id
        FROM ordered_jobs AS j
        WHERE j.status = 'running'
          AND j.lease_until <= statement_timestamp()
          AND j.attempts < j.max_attempts
          AND NOT EXISTS (
              SELECT 1
              FROM (SELECT e.seq FROM ordered_jobs AS e
                    WHERE e.key = j.key AND e.status IN ('queued', 'running', 'blocked')
                    ORDER BY e.seq LIMIT 1) AS lowest
              WHERE lowest.seq < j.seq)
        ORDER BY j.lease_until
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), ready AS (
        SELECT j.id
        FROM ordered_jobs AS j
        WHERE j.head
          AND j.status = 'queued'
          AND j.available_at <= statement_timestamp()
          AND NOT EXISTS (
              SELECT 1
              FROM (SELECT e.seq FROM ordered_jobs AS e
                    WHERE e.key = j.key AND e.status IN ('queued', 'running', 'blocked')
                    ORDER BY e.seq LIMIT 1) AS lowest
              WHERE lowest.seq < j.seq)
        ORDER BY j.available_at, j.id
        LIMIT greatest(p_limit - (SELECT count(*) FROM recovered), 0)
        FOR UPDATE SKIP LOCKED
    ), claimed AS (
        -- The candidates are handed over as an array, so the update finds them through the
        -- primary key whatever the planner guesses of their number (a join here was planned
        -- as a hash join over a sequential scan of the whole table).
        UPDATE ordered_jobs AS j
        SET status = 'running',
            attempts = j.attempts + 1,
            claim_version = j.claim_version + 1,
            lease_until = statement_timestamp() + p_lease,
            attempted_at = statement_timestamp()
        WHERE j.id = ANY (ARRAY(SELECT r.id FROM recovered AS r
                                UNION ALL SELECT r.id FROM ready AS r))
        RETURNING j.id, j.key, j.seq, j.kind, j.payload, j.attempts, j.max_attempts,
                  j.claim_version, j.lease_until, j.created_at, j.available_at,
                  j.attempted_at, j.last_error,
                  j.id = ANY (ARRAY(SELECT r.id FROM recovered AS r)) AS recovered
    )
    SELECT * FROM claimed;
END
$$;
