-- ordered_jobs_extend turns claimed heads (p_heads: running jobs this transaction claimed) into
-- batches: each head is followed by up to p_batch - 1 of its key's next open jobs, in seq
-- order, each claimed as the claim does and leased until its head's lease ends. A batch stops
-- at the first job that is not queued and due (a crashed batch's rest, still running with an
-- expired lease, is recovered one job at a time: see ordered_jobs_claim_batch), that another
-- transaction locks, or, on a contiguous key (next_seq set), at a hole in the seqs. Later jobs
-- keep head = false, so no other claim can take them.
--
-- The caller holds the heads' key rows (FOR SHARE at least) since before this call: no
-- enqueue of those keys is in flight, so no event can land between two jobs of a batch (one
-- below a job that has started is late, and an enqueue sees these as started). It reads at
-- most p_batch - 1 entries of ordered_jobs_open per head, whatever the key's backlog.
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
    v_cand_heads bigint[];
    v_cand_leases timestamptz[];
    v_locked bigint[];
    v_ext bigint[];
    v_leases timestamptz[];
BEGIN
    IF p_batch IS NULL OR p_batch <= 1 OR coalesce(cardinality(p_heads), 0) = 0 THEN
        RETURN;
    END IF;

    -- The candidates: each head's next open jobs, as far as they are claimable in a row. The
    -- inner LIMIT keeps the walk of ordered_jobs_open to p_batch - 1 entries a head.
    SELECT array_agg(c.id ORDER BY c.head_id, c.seq), array_agg(c.head_id ORDER BY c.head_id, c.seq),
           array_agg(c.head_lease ORDER BY c.head_id, c.seq)
    INTO v_cand, v_cand_heads, v_cand_leases
    FROM (
        SELECT h.id AS head_id, h.lease_until AS head_lease, o.id, o.seq,
               bool_and(o.claimable AND (k.next_seq IS NULL OR o.seq = h.seq + o.n))
                   OVER (PARTITION BY h.id ORDER BY o.seq) AS in_batch
        FROM ordered_jobs AS h
        JOIN ordered_keys AS k ON k.key = h.key
        CROSS JOIN LATERAL (
            SELECT f.id, f.seq, f.claimable, row_number() OVER (ORDER BY f.seq) AS n
            FROM (SELECT o.id, o.seq,
                         o.status = 'queued' AND o.available_at <= statement_timestamp() AS claimable
                  FROM ordered_jobs AS o
                  WHERE o.key = h.key AND o.status IN ('queued', 'running', 'blocked')
                    AND o.seq > h.seq
                  ORDER BY o.seq
                  LIMIT p_batch - 1) AS f) AS o
        WHERE h.id = ANY (p_heads)
    ) AS c
    WHERE c.in_batch;
    IF v_cand IS NULL THEN
        RETURN;
    END IF;

    -- Lock them, never waiting: a job another transaction holds ends its batch.
    SELECT array_agg(l.id) INTO v_locked
    FROM (SELECT j.id FROM ordered_jobs AS j
          WHERE j.id = ANY (v_cand) AND NOT j.head
            AND j.status = 'queued' AND j.available_at <= statement_timestamp()
          FOR UPDATE SKIP LOCKED) AS l;

    SELECT array_agg(c.id ORDER BY c.ord), array_agg(c.lease ORDER BY c.ord)
    INTO v_ext, v_leases
    FROM (SELECT c.id, c.ord, c.lease,
                 bool_and(l.id IS NOT NULL) OVER (PARTITION BY c.head_id ORDER BY c.ord) AS ok
          FROM unnest(v_cand, v_cand_heads, v_cand_leases) WITH ORDINALITY AS c(id, head_id, lease, ord)
          LEFT JOIN unnest(v_locked) AS l(id) ON l.id = c.id) AS c
    WHERE c.ok;
    IF v_ext IS NULL THEN
        RETURN;
    END IF;

    RETURN QUERY
    WITH claimed AS (
        UPDATE ordered_jobs AS j
        SET status = 'running',
            attempts = j.attempts + 1,
            claim_version = j.claim_version + 1,
            claimed_by = nullif(current_setting('application_name'), ''),
            lease_until = u.lease,
            attempted_at = clock_timestamp()
        FROM unnest(v_ext, v_leases) AS u(id, lease)
        WHERE j.id = u.id
        RETURNING j.id, j.key, j.seq, j.kind, j.payload, j.attempts, j.max_attempts,
                  j.claim_version, j.lease_until, j.created_at, j.available_at,
                  j.attempted_at, j.last_error, false AS recovered
    )
    SELECT * FROM claimed ORDER BY claimed.key, claimed.seq;
END
$$;
COMMENT ON FUNCTION ordered_jobs_extend(bigint[], integer) IS
'Internal to ordered: extends claimed heads into batches of their keys'' next jobs (batch workers). Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
