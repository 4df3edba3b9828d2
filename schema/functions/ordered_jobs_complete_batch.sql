-- ordered_jobs_complete_batch is ordered_jobs_complete for batch workers: it completes the
-- claims given (the finished prefixes of batches; several jobs of one key complete together,
-- and the key's next head is its lowest open job) and claims up to p_next_limit batches of up
-- to p_batch jobs, all in one statement: the keys' next heads first, each extended into a
-- batch (ordered_jobs_extend), then, if fewer, other ready heads as ordered_jobs_claim_batch
-- claims them, so that a worker whose key ran dry goes on with another without a claim
-- statement of its own. A next head left running by a crashed batch, its lease expired, is
-- not a queued head: only that trailing claim takes it, recovered and alone.
-- ordered_jobs_complete holds the completed keys' rows FOR SHARE from its start, so their
-- extension sees every enqueue of those keys that committed; the other keys are locked
-- without waiting, as ordered_jobs_claim_batch does. Rows as ordered_jobs_complete's (the
-- completed claims, then the claimed jobs), with recovered set on a job that the trailing claim
-- took back from an expired lease.
CREATE OR REPLACE FUNCTION ordered_jobs_complete_batch(p_ids bigint[], p_versions bigint[],
                                                       p_next_limit integer, p_batch integer,
                                                       p_lease interval)
RETURNS TABLE (completed boolean, id bigint, key text, seq bigint, kind text, payload jsonb,
               attempts integer, max_attempts integer, claim_version bigint,
               lease_until timestamptz, created_at timestamptz, available_at timestamptz,
               attempted_at timestamptz, last_error text, recovered boolean)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_heads bigint[];
    v_more integer;
BEGIN
    -- The completion's rows are returned as they come; the heads it claimed are extended.
    FOR completed, id, key, seq, kind, payload, attempts, max_attempts, claim_version,
        lease_until, created_at, available_at, attempted_at, last_error IN
        SELECT * FROM ordered_jobs_complete(p_ids, p_versions, p_next_limit, p_lease)
    LOOP
        recovered := false;
        IF NOT completed THEN
            v_heads := v_heads || id;
        END IF;
        RETURN NEXT;
    END LOOP;
    IF v_heads IS NOT NULL AND p_batch > 1 THEN
        RETURN QUERY
        SELECT false, e.id, e.key, e.seq, e.kind, e.payload, e.attempts, e.max_attempts,
               e.claim_version, e.lease_until, e.created_at, e.available_at, e.attempted_at,
               e.last_error, false
        FROM ordered_jobs_extend(v_heads, p_batch) AS e;
    END IF;
    v_more := coalesce(p_next_limit, 0) - coalesce(cardinality(v_heads), 0);
    IF v_more > 0 AND p_lease IS NOT NULL THEN
        RETURN QUERY
        SELECT false, c.id, c.key, c.seq, c.kind, c.payload, c.attempts, c.max_attempts,
               c.claim_version, c.lease_until, c.created_at, c.available_at, c.attempted_at,
               c.last_error, c.recovered
        FROM ordered_jobs_claim_batch(v_more, p_batch, p_lease) AS c;
    END IF;
END
$$;
COMMENT ON FUNCTION ordered_jobs_complete_batch(bigint[], bigint[], integer, integer, interval) IS
'Internal to ordered: completes the finished prefixes of batches and claims the keys'' next batches (batch workers). Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
