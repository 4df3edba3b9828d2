-- ordered_job_skip releases a key blocked by a failed job: the job stays, as failed, and the
-- key's next job becomes its head. Skipping a job that already failed without blocking is a
-- no-op. ORD04: no such failed job.
CREATE OR REPLACE FUNCTION ordered_job_skip(p_id bigint) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_key text;
BEGIN
    SELECT o_key INTO v_key FROM ordered_job_lock_key(p_id, true);
    IF NOT EXISTS (SELECT 1 FROM ordered_jobs
                   WHERE id = p_id AND status IN ('failed', 'blocked')) THEN
        RAISE EXCEPTION 'ordered: job % is not a failed job', p_id USING ERRCODE = 'ORD04';
    END IF;
    UPDATE ordered_jobs SET status = 'failed', head = false
    WHERE id = p_id AND status = 'blocked';
    IF FOUND THEN
        PERFORM ordered_heads_refresh(ARRAY[v_key]);
        PERFORM pg_notify('ordered_jobs', current_schema());
    END IF;
END
$$;
