-- ordered_jobs_extend turns claimed heads (p_heads: the jobs of heads this transaction claimed)
-- into batches: each head is followed by up to p_batch - 1 of its key's next open jobs, in seq
-- order. A batch stops at the first job that is not queued and due (a crashed batch's rest,
-- marked by its recovery, is recovered one job at a time: see ordered_jobs_claim) or, on a
-- contiguous key (next_seq set), at a hole in the seqs.
--
-- Only the head row is written: its batch_to becomes the seq of the batch's last job. The later
-- jobs stay queued behind the head, so no other claim can take them, and are returned as
-- the claim of each would be: its attempt counted, its claim version raised, the head's lease.
-- The settlements of a batch (ordered_jobs_complete, job_release_unrun_many.sql,
-- job_lease_extend_many.sql) accept these claims through the running head that covers them.
--
-- The caller holds the heads' key rows (FOR SHARE at least) since before this call: no
-- enqueue or admin operation of those keys is in flight, so no event can land between two jobs
-- of a batch (an enqueue finds an event below a running head's batch_to late). It reads at
-- most p_batch - 1 entries of the key's jobs per head, whatever the key's backlog.
CREATE OR REPLACE FUNCTION ordered_jobs_extend(p_heads bigint[], p_batch integer)
RETURNS TABLE (id bigint, key text, seq bigint, kind text, payload jsonb, attempts integer,
               max_attempts integer, claim_version bigint, lease_until timestamptz,
               created_at timestamptz, available_at timestamptz, attempted_at timestamptz,
               last_error text, recovered boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_cand bigint[];
    v_cand_keys text[];
    v_cand_seqs bigint[];
BEGIN
    IF p_batch IS NULL OR p_batch <= 1 OR coalesce(cardinality(p_heads), 0) = 0 THEN
        RETURN;
    END IF;

    -- The candidates: each head's next open jobs, as far as they are claimable in a row. The
    -- inner LIMIT keeps the walk of the key's jobs to p_batch - 1 entries a head.
    SELECT array_agg(c.id ORDER BY c.key, c.seq), array_agg(c.key ORDER BY c.key, c.seq),
           array_agg(c.seq ORDER BY c.key, c.seq)
    INTO v_cand, v_cand_keys, v_cand_seqs
    FROM (
        SELECT h.key, o.id, o.seq,
               bool_and(o.claimable AND (k.next_seq IS NULL OR o.seq = h.seq + o.n))
                   OVER (PARTITION BY h.key ORDER BY o.seq) AS in_batch
        FROM unnest(p_heads) AS p(id)
        CROSS JOIN LATERAL (SELECT j.key FROM ordered_jobs AS j WHERE j.id = p.id OFFSET 0) AS pj
        CROSS JOIN LATERAL (SELECT h.* FROM ordered_heads AS h WHERE h.key = pj.key OFFSET 0) AS h
        JOIN ordered_keys AS k ON k.key = h.key
        CROSS JOIN LATERAL (
            SELECT f.id, f.seq, f.claimable, row_number() OVER (ORDER BY f.seq) AS n
            FROM (SELECT o.id, o.seq,
                         o.status = 'queued' AND o.crash_lease_until IS NULL
                             AND o.available_at <= statement_timestamp() AS claimable
                  FROM ordered_jobs AS o
                  WHERE o.key = h.key AND o.seq > h.seq AND o.status IN ('queued', 'blocked')
                  ORDER BY o.seq
                  LIMIT p_batch - 1) AS f) AS o
        WHERE h.job_id = p.id AND h.state = 'running'
    ) AS c
    WHERE c.in_batch;
    IF v_cand IS NULL THEN
        RETURN;
    END IF;

    -- The later jobs are not written: the head's batch_to claims them (its key's open jobs
    -- above it up to batch_to), and they are returned as a claim would return them.
    RETURN QUERY
    WITH batches AS (
        UPDATE ordered_heads AS h
        SET batch_to = b.batch_to
        FROM (SELECT c.key, max(c.seq) AS batch_to
              FROM unnest(v_cand_keys, v_cand_seqs) AS c(key, seq)
              GROUP BY c.key) AS b
        WHERE h.key = b.key
        RETURNING h.key, h.lease_until, h.attempted_at
    )
    SELECT j.id, j.key, j.seq, j.kind, j.payload, j.attempts + 1, j.max_attempts,
           j.claim_version + 1, b.lease_until, j.created_at, j.available_at, b.attempted_at,
           j.last_error, false
    FROM unnest(v_cand, v_cand_keys) AS c(id, key)
    JOIN batches AS b ON b.key = c.key
    CROSS JOIN LATERAL (SELECT j.* FROM ordered_jobs AS j WHERE j.id = c.id OFFSET 0) AS j
    ORDER BY j.key, j.seq;
END
$$;
COMMENT ON FUNCTION ordered_jobs_extend(bigint[], integer) IS
'Internal to ordered: extends claimed heads into batches of their keys'' next jobs (batch workers). Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
