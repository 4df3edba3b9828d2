-- ordered_job_fail fails a job for good. p_block keeps it at the head of its key (status
-- blocked: later jobs wait); otherwise it becomes failed and the key moves on. With p_expired
-- the claim must have an expired lease and no attempts left (a crashed worker's job); otherwise
-- it must be the current claim with a live lease. Returns false, changing nothing, if not.
CREATE OR REPLACE FUNCTION ordered_job_fail(p_id bigint, p_version bigint, p_error text,
                                 p_block boolean, p_expired boolean) RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_key text;
    v_seq bigint;
    v_batch_to bigint;
    v_attempted_at timestamptz;
    v_claimed_by text;
BEGIN
    SELECT o_key INTO v_key FROM ordered_job_lock_key(p_id, false);
    IF v_key IS NULL THEN
        RETURN false;
    END IF;
    UPDATE ordered_jobs
    SET status = CASE WHEN p_block THEN 'blocked' ELSE 'failed' END,
        head = p_block, lease_until = NULL, last_error = p_error,
        finished_at = clock_timestamp()
    WHERE id = p_id AND claim_version = p_version AND status = 'running'
      AND CASE WHEN p_expired
               THEN lease_until <= clock_timestamp() AND attempts >= max_attempts
               ELSE lease_until > clock_timestamp() END
    RETURNING seq, batch_to, attempted_at, claimed_by INTO v_seq, v_batch_to, v_attempted_at, v_claimed_by;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- The batch it led, if any, ends with it (as its recovery would end a crashed one).
    PERFORM ordered_batch_end(v_key, v_seq, v_batch_to, p_expired, clock_timestamp(),
                              v_attempted_at, v_claimed_by);
    IF NOT p_block THEN
        PERFORM ordered_heads_refresh(ARRAY[v_key]);
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION ordered_job_fail(bigint, bigint, text, boolean, boolean) IS
'Internal to ordered: fails a claimed job for good (the worker, Client.Fail, FailExhausted). Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
