-- ordered_job_replay queues a failed job again with its attempts reset. If a later job of its
-- key has already started, the replay would run out of order: it raises ORD02 unless p_force.
-- It always raises ORD03 while a later job of the key is running, or is held by a running
-- batch (a running head's batch_to above this job). ORD04: no such failed job.
-- It locks the key's first later open job before it checks the later jobs, so that a claim or
-- retry (which do not wait for the key row) cannot change that job between the checks and the
-- move of the head.
CREATE OR REPLACE FUNCTION ordered_job_replay(p_id bigint, p_force boolean) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_key text;
    v_seq bigint;
BEGIN
    SELECT o_key, o_seq INTO v_key, v_seq FROM ordered_job_lock_key(p_id, true);
    PERFORM ordered_job_require_failed(p_id);
    -- Claims, retries and give-backs do not wait for the key row: lock the key's first later
    -- open job, the only one of them that can be claimed or retried (it is the head, unless
    -- this job is), so that the checks below stay true until this transaction ends.
    PERFORM 1 FROM (
        SELECT j.id FROM ordered_jobs AS j
        WHERE j.key = v_key AND j.seq > v_seq AND j.status IN ('queued', 'running', 'blocked')
        ORDER BY j.seq LIMIT 1) AS later
    JOIN ordered_jobs AS j ON j.id = later.id
    FOR NO KEY UPDATE OF j;
    IF EXISTS (SELECT 1 FROM ordered_jobs
               WHERE key = v_key AND seq > v_seq AND status IN ('queued', 'running', 'blocked')
                 AND status = 'running')
       OR EXISTS (SELECT 1 FROM ordered_jobs
                  WHERE key = v_key AND head AND status = 'running' AND batch_to > v_seq) THEN
        RAISE EXCEPTION 'ordered: job % cannot be replayed while a later job of key % is running',
            p_id, v_key USING ERRCODE = 'ORD03';
    END IF;
    IF NOT p_force AND (
            EXISTS (SELECT 1 FROM ordered_jobs
                    WHERE key = v_key AND seq > v_seq AND status IN ('done', 'failed'))
         OR EXISTS (SELECT 1 FROM ordered_jobs
                    WHERE key = v_key AND seq > v_seq AND status IN ('queued', 'running', 'blocked')
                      AND (status <> 'queued' OR attempted_at IS NOT NULL))) THEN
        RAISE EXCEPTION 'ordered: replaying job % would run it after later jobs of key % (force to replay anyway)',
            p_id, v_key USING ERRCODE = 'ORD02';
    END IF;
    UPDATE ordered_jobs
    SET status = 'queued', head = false, attempts = 0, available_at = now(),
        lease_until = NULL, finished_at = NULL
    WHERE id = p_id;
    PERFORM ordered_heads_refresh(ARRAY[v_key]);
    PERFORM pg_notify('ordered_jobs', current_schema());
END
$$;
COMMENT ON FUNCTION ordered_job_replay(bigint, boolean) IS
'Internal to ordered: queues a failed job again (ordered replay, Client.Replay). Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
