-- ordered_job_skip releases a key blocked by a failed job: the job stays, as failed, and the
-- key's next job becomes its head. It returns false, changing nothing, for a failed job that
-- holds nothing (failed under the skip policy, or skipped before). ORD04: no such failed job.
CREATE OR REPLACE FUNCTION ordered_job_skip(p_id bigint) RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_key text;
    v_seq bigint;
    v_closed_above bigint;
BEGIN
    SELECT o_key, o_seq INTO v_key, v_seq FROM ordered_job_lock_key(p_id, true);
    PERFORM ordered_job_require_failed(p_id);
    UPDATE ordered_jobs SET status = 'failed' WHERE id = p_id AND status = 'blocked';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- A contiguous key's next seq moves past the job, as it would past one done: a job that is
    -- not the head (a forced replay's earlier job heads the key) is then passed when the key
    -- reaches it, not taken for a missing seq.
    UPDATE ordered_keys AS k SET next_seq = greatest(k.next_seq, v_seq + 1)
    WHERE k.key = v_key AND k.next_seq IS NOT NULL;
    -- A blocked head goes, and the key's next job heads it.
    DELETE FROM ordered_heads AS h WHERE h.key = v_key AND h.job_id = p_id
    RETURNING h.closed_above INTO v_closed_above;
    IF FOUND THEN
        PERFORM ordered_heads_refresh(ARRAY[v_key], v_seq + 1, false, v_closed_above);
    END IF;
    PERFORM pg_notify('ordered_jobs', current_schema());
    RETURN true;
END
$$;
COMMENT ON FUNCTION ordered_job_skip(bigint) IS
'Internal to ordered: releases a key blocked by a failed job (ordered skip, Client.Skip). Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
