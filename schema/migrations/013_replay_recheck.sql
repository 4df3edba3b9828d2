-- A replay checks again, after it moved the key's head, that no later job of the key has
-- started. Its first check runs before it queues the job, and claims do not wait for the key
-- row it holds: the key's head could be claimed and given back for a retry in between, and
-- the replay, unforced, then ran the job before one that had started
-- (TestReplayBelowAHeadThatStartedMeanwhileNeedsForce). The same race as in
-- 012_enqueue_late_recheck.sql. The body is otherwise that of 001_queue.sql.
CREATE OR REPLACE FUNCTION ordered_job_replay(p_id bigint, p_force boolean) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_key text;
    v_seq bigint;
BEGIN
    SELECT o_key, o_seq INTO v_key, v_seq FROM ordered_job_lock_key(p_id, true);
    IF NOT EXISTS (SELECT 1 FROM ordered_jobs
                   WHERE id = p_id AND status IN ('failed', 'blocked')) THEN
        RAISE EXCEPTION 'ordered: job % is not a failed job', p_id USING ERRCODE = 'ORD04';
    END IF;
    IF EXISTS (SELECT 1 FROM ordered_jobs
               WHERE key = v_key AND seq > v_seq AND status IN ('queued', 'running', 'blocked')
                 AND status = 'running') THEN
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
    -- The checks above ran before the update, and a claim does not wait for the key row: the
    -- key's head may have been claimed and given back for a retry since. The refresh holds
    -- the head it demoted now, so this second look is final. (A head claimed and still
    -- running was kept by the refresh, which raised ORD01.)
    IF NOT p_force AND EXISTS (
            SELECT 1 FROM ordered_jobs
            WHERE key = v_key AND seq > v_seq AND status IN ('queued', 'running', 'blocked')
              AND (status <> 'queued' OR attempted_at IS NOT NULL)) THEN
        RAISE EXCEPTION 'ordered: replaying job % would run it after later jobs of key % (force to replay anyway)',
            p_id, v_key USING ERRCODE = 'ORD02';
    END IF;
    PERFORM pg_notify('ordered_jobs', current_schema());
END
$$;
