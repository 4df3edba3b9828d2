-- ordered_jobs_claim_batch is the claim of a batch worker: up to p_limit heads, claimed and
-- recovered exactly as ordered_jobs_claim does, each head that was not recovered followed by
-- up to p_batch - 1 of its key's next jobs (ordered_jobs_extend), all leased for p_lease.
-- Rows come key by key, in seq order, a batch's head first.
--
-- A head is extended only if its key row can be locked FOR SHARE at once: that shuts out the
-- key's enqueues until this commits, and the extension reads the key's jobs with a snapshot
-- taken after the lock, so it sees every enqueue that committed before. A key an enqueue (or
-- an admin operation) holds gets a batch of its head alone; nothing ever waits.
--
-- A recovered head is not extended either: its batch crashed or stalled its worker, so each of
-- its jobs runs alone until it is past them, and only the job that kills its worker spends
-- attempts on it (and is failed when they run out), not the batch around it.
CREATE OR REPLACE FUNCTION ordered_jobs_claim_batch(p_limit integer, p_batch integer, p_lease interval)
RETURNS TABLE (id bigint, key text, seq bigint, kind text, payload jsonb, attempts integer,
               max_attempts integer, claim_version bigint, lease_until timestamptz,
               created_at timestamptz, available_at timestamptz, attempted_at timestamptz,
               last_error text, recovered boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_claimed ordered_claimed_job[];
    v_keys text[];
    v_locked text[];
    v_extend bigint[];
BEGIN
    SELECT array_agg(c::ordered_claimed_job), array_agg(DISTINCT c.key)
    INTO v_claimed, v_keys
    FROM ordered_jobs_claim(p_limit, p_lease) AS c;
    IF v_claimed IS NULL THEN
        RETURN;
    END IF;

    IF p_batch > 1 THEN
        SELECT array_agg(k.key) INTO v_locked
        FROM (SELECT k.key FROM ordered_keys AS k WHERE k.key = ANY (v_keys)
              ORDER BY k.key FOR SHARE SKIP LOCKED) AS k;
        IF v_locked IS NOT NULL THEN
            v_extend := ARRAY(SELECT c.id FROM unnest(v_claimed) AS c
                              WHERE c.key = ANY (v_locked) AND NOT c.recovered);
        END IF;
    END IF;

    RETURN QUERY
    SELECT b.* FROM (
        SELECT c.* FROM unnest(v_claimed) AS c
        UNION ALL
        SELECT e.* FROM ordered_jobs_extend(v_extend, p_batch) AS e
    ) AS b
    ORDER BY b.key, b.seq;
END
$$;
COMMENT ON FUNCTION ordered_jobs_claim_batch(integer, integer, interval) IS
'Internal to ordered: the claim of a batch worker: heads and their keys'' next jobs. Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
