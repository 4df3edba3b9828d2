-- ordered_job_skip releases a key blocked by a failed job: the job stays, as failed, and the
-- key's next job becomes its head. It returns false, changing nothing, for a failed job that
-- holds nothing (failed under the skip policy, or skipped before). ORD04: no such failed job.
CREATE OR REPLACE FUNCTION ordered_job_skip(p_id bigint) RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_key text;
BEGIN
    SELECT o_key INTO v_key FROM ordered_job_lock_key(p_id, true);
    PERFORM ordered_job_require_failed(p_id);
    UPDATE ordered_jobs SET status = 'failed', head = false
    WHERE id = p_id AND status = 'blocked';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM ordered_heads_refresh(ARRAY[v_key]);
    PERFORM pg_notify('ordered_jobs', current_schema());
    RETURN true;
END
$$;
COMMENT ON FUNCTION ordered_job_skip(bigint) IS
'Internal to ordered: releases a key blocked by a failed job (ordered skip, Client.Skip). Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
