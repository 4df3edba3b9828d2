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
    h ordered_heads;
BEGIN
    SELECT o_key INTO v_key FROM ordered_job_lock_key(p_id, false);
    IF v_key IS NULL THEN
        RETURN false;
    END IF;
    -- The head: blocked, its claim kept on its row; or gone, the key's next job becoming the
    -- head below.
    IF p_block THEN
        UPDATE ordered_heads AS o
        SET state = 'blocked', lease_until = NULL, batch_to = NULL
        FROM ordered_heads AS c
        WHERE o.key = v_key AND c.key = v_key AND o.job_id = p_id AND o.claim_version = p_version
          AND CASE WHEN p_expired
                   THEN o.lease_until <= clock_timestamp() AND o.attempts >= o.max_attempts
                   ELSE o.lease_until > clock_timestamp() END
        RETURNING c.* INTO h;
    ELSE
        DELETE FROM ordered_heads AS o
        WHERE o.key = v_key AND o.job_id = p_id AND o.claim_version = p_version
          AND CASE WHEN p_expired
                   THEN o.lease_until <= clock_timestamp() AND o.attempts >= o.max_attempts
                   ELSE o.lease_until > clock_timestamp() END
        RETURNING o.* INTO h;
    END IF;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE ordered_jobs
    SET status = CASE WHEN p_block THEN 'blocked' ELSE 'failed' END,
        attempts = h.attempts, claim_version = h.claim_version, attempted_at = h.attempted_at,
        claimed_by = h.claimed_by, last_error = p_error,
        finished_at = clock_timestamp(), failed_at = clock_timestamp()
    WHERE id = p_id;
    -- The batch it led, if any, ends with it (as its recovery would end a crashed one).
    PERFORM ordered_batch_end(v_key, h.seq, h.batch_to, p_expired, clock_timestamp(),
                              h.attempted_at, h.claimed_by);
    IF NOT p_block THEN
        -- a contiguous key has passed the failed job
        UPDATE ordered_keys AS k SET next_seq = greatest(k.next_seq, h.seq + 1)
        WHERE k.key = v_key AND k.next_seq IS NOT NULL;
        PERFORM ordered_heads_refresh(ARRAY[v_key], h.seq + 1, false, h.closed_above);
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION ordered_job_fail(bigint, bigint, text, boolean, boolean) IS
'Internal to ordered: fails a claimed job for good (the worker, Client.Fail, FailExhausted). Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
