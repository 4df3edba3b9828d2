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
-- statement's snapshot, PostgreSQL re-checks head and status on the new row version. Its plans
-- are pinned to the index walks above: a queue table's statistics lag behind its churn.
CREATE OR REPLACE FUNCTION ordered_jobs_claim(p_limit integer, p_lease interval)
RETURNS TABLE (id bigint, key text, seq bigint, kind text, payload jsonb, attempts integer,
               max_attempts integer, claim_version bigint, lease_until timestamptz,
               created_at timestamptz, available_at timestamptz, attempted_at timestamptz,
               last_error text, recovered boolean)
LANGUAGE plpgsql
SET enable_sort = off
SET enable_seqscan = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_ended bigint;
BEGIN
    -- A batch whose lease expired ends first: its later jobs are marked as its claim would have
    -- left them (ordered_batch_end), so that each is recovered alone in its turn and the crashed
    -- worker's claims of them are fenced; its head, no longer leading a batch, is recovered
    -- below as any job. Expired leases are few, so the probe costs one index entry or so.
    IF EXISTS (SELECT 1 FROM ordered_jobs AS j
               WHERE j.status = 'running' AND j.lease_until <= statement_timestamp()
                 AND j.batch_to IS NOT NULL) THEN
        WITH crashed AS (
            SELECT j.id, j.key, j.seq, j.batch_to, j.lease_until, j.attempted_at, j.claimed_by
            FROM ordered_jobs AS j
            WHERE j.status = 'running' AND j.lease_until <= statement_timestamp()
              AND j.batch_to IS NOT NULL
            FOR UPDATE SKIP LOCKED
        ), unbatched AS (
            UPDATE ordered_jobs AS j SET batch_to = NULL
            FROM crashed AS c WHERE j.id = c.id
        )
        SELECT count(*) INTO v_ended
        FROM crashed AS c
        CROSS JOIN LATERAL (SELECT ordered_batch_end(c.key, c.seq, c.batch_to, true, c.lease_until,
                                                     c.attempted_at, c.claimed_by)) AS ended;
    END IF;

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
            claimed_by = nullif(current_setting('application_name'), ''),
            lease_until = statement_timestamp() + p_lease,
            batch_to = NULL,
            -- Read after the statement's snapshot, so a claim is never stamped before the
            -- completion it saw (the statement may have begun before that one committed).
            attempted_at = clock_timestamp()
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
COMMENT ON FUNCTION ordered_jobs_claim(integer, interval) IS
'Internal to ordered: the claim: leases up to p_limit ready jobs (workers). Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
