-- ordered_jobs_claim takes up to p_limit jobs and leases them for p_lease: one statement, one
-- auto-committed transaction. It claims heads (ordered_heads: one row a key, the key's lowest
-- open job), and writes only their rows: the jobs' rows are read for their payloads.
--
-- Two kinds of candidate, recovered leases first:
--   * a running head whose lease expired and that has attempts left (its worker crashed or
--     stalled; exhausted ones are failed by maintenance, never claimed);
--   * a queued head that is due (ordered_heads_ready holds one row per key at most, so a key's
--     backlog is never scanned).
-- Both carry the same NOT EXISTS guard: no open job of the same key with a lower seq (looked
-- for above the head's closed_to, below which every job has finished). It always applies, also
-- to recovery. FOR UPDATE SKIP LOCKED: a head locked by another claim, a completion or an
-- enqueue that is moving it is skipped, never waited for; if it changed since this statement's
-- snapshot, PostgreSQL checks its state again on the new row version. Its plans are pinned to
-- the index walks above (the guard's LIMIT keeps it one probe per candidate): a queue table's
-- statistics lag behind its churn. They are made once a session (a generic plan): planning the
-- statement for each call's values costs more than running it.
CREATE OR REPLACE FUNCTION ordered_jobs_claim(p_limit integer, p_lease interval)
RETURNS TABLE (id bigint, key text, seq bigint, kind text, payload jsonb, attempts integer,
               max_attempts integer, claim_version bigint, lease_until timestamptz,
               created_at timestamptz, available_at timestamptz, attempted_at timestamptz,
               last_error text, recovered boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
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
    -- below as any head. Expired leases are few, so the probe costs one index entry or so.
    IF EXISTS (SELECT 1 FROM ordered_heads AS h
               WHERE h.state = 'running' AND h.lease_until <= statement_timestamp()
                 AND h.batch_to IS NOT NULL) THEN
        WITH crashed AS (
            SELECT h.key, h.seq, h.batch_to, h.lease_until, h.attempted_at, h.claimed_by
            FROM ordered_heads AS h
            WHERE h.state = 'running' AND h.lease_until <= statement_timestamp()
              AND h.batch_to IS NOT NULL
            FOR UPDATE SKIP LOCKED
        ), unbatched AS (
            UPDATE ordered_heads AS h SET batch_to = NULL
            FROM crashed AS c WHERE h.key = c.key
        )
        SELECT count(*) INTO v_ended
        FROM crashed AS c
        CROSS JOIN LATERAL (SELECT ordered_batch_end(c.key, c.seq, c.batch_to, true, c.lease_until,
                                                     c.attempted_at, c.claimed_by)) AS ended;
    END IF;

    RETURN QUERY
    WITH recovered AS (
        SELECT h.key
        FROM ordered_heads AS h
        WHERE h.state = 'running'
          AND h.lease_until <= statement_timestamp()
          AND h.attempts < h.max_attempts
          AND NOT EXISTS (SELECT 1 FROM (
                              SELECT 1 FROM ordered_jobs AS e
                              WHERE e.key = h.key AND e.seq > h.closed_to AND e.seq < h.seq
                                AND e.status IN ('queued', 'blocked')
                              LIMIT 1) AS lower)
        ORDER BY h.lease_until
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), ready AS (
        SELECT h.key
        FROM ordered_heads AS h
        WHERE h.state = 'queued'
          AND h.available_at <= statement_timestamp()
          AND NOT EXISTS (SELECT 1 FROM (
                              SELECT 1 FROM ordered_jobs AS e
                              WHERE e.key = h.key AND e.seq > h.closed_to AND e.seq < h.seq
                                AND e.status IN ('queued', 'blocked')
                              LIMIT 1) AS lower)
        ORDER BY h.available_at
        LIMIT greatest(p_limit - (SELECT count(*) FROM recovered), 0)
        FOR UPDATE SKIP LOCKED
    ), claimed AS (
        -- The candidates are handed over as an array, so the update finds them through the
        -- primary key whatever the planner guesses of their number.
        UPDATE ordered_heads AS h
        SET state = 'running',
            attempts = h.attempts + 1,
            claim_version = h.claim_version + 1,
            claimed_by = nullif(current_setting('application_name'), ''),
            lease_until = ordered_lease_end(statement_timestamp(), p_lease),
            batch_to = NULL,
            -- Read after the statement's snapshot, so a claim is never stamped before the
            -- completion it saw (the statement may have begun before that one committed).
            attempted_at = clock_timestamp()
        WHERE h.key = ANY (ARRAY(SELECT r.key FROM recovered AS r
                                 UNION ALL SELECT r.key FROM ready AS r))
        RETURNING h.job_id, h.key, h.seq, h.attempts, h.max_attempts, h.claim_version,
                  h.lease_until, h.available_at, h.attempted_at,
                  h.key = ANY (ARRAY(SELECT r.key FROM recovered AS r)) AS recovered
    )
    SELECT c.job_id, c.key, c.seq, j.kind, j.payload, c.attempts, c.max_attempts,
           c.claim_version, c.lease_until, j.created_at, c.available_at, c.attempted_at,
           j.last_error, c.recovered
    FROM claimed AS c
    CROSS JOIN LATERAL (SELECT j.kind, j.payload, j.created_at, j.last_error
                        FROM ordered_jobs AS j WHERE j.id = c.job_id OFFSET 0) AS j;
END
$$;
COMMENT ON FUNCTION ordered_jobs_claim(integer, interval) IS
'Internal to ordered: the claim: leases up to p_limit ready jobs (workers). Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
