-- A completion inside the caller's transaction (CompleteTx) raises ORD06 when its claim is no
-- longer current, so the transaction is aborted: the effect written beside the completion can
-- never commit without it, even when the caller ignores the error and commits (PostgreSQL
-- answers that COMMIT with a ROLLBACK). ordered_job_complete had no caller since
-- 002_complete_many.sql (workers complete through ordered_jobs_complete); it now takes this
-- job. A current claim costs the statement it did before: one call of ordered_jobs_complete.
DROP FUNCTION ordered_job_complete(bigint, bigint);
CREATE FUNCTION ordered_job_complete(p_id bigint, p_version bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM ordered_jobs_complete(ARRAY[p_id], ARRAY[p_version]) AS c
                   WHERE c.completed) THEN
        RAISE EXCEPTION 'ordered: lease lost: claim % of job % is no longer current (its lease expired or the job was claimed again)',
            p_version, p_id USING ERRCODE = 'ORD06';
    END IF;
END
$$;

-- Replay and skip say why they refuse a job that is not failed: it does not exist, or its
-- status. ordered_job_require_failed raises ORD04 unless job p_id exists and has failed.
CREATE FUNCTION ordered_job_require_failed(p_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
BEGIN
    SELECT j.status INTO v_status FROM ordered_jobs AS j WHERE j.id = p_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'ordered: job % does not exist', p_id USING ERRCODE = 'ORD04';
    END IF;
    IF v_status NOT IN ('failed', 'blocked') THEN
        RAISE EXCEPTION 'ordered: job % is %, not failed', p_id, v_status USING ERRCODE = 'ORD04';
    END IF;
END
$$;

-- The body of ordered_job_replay is otherwise that of 013_replay_locks_later_job.sql.
CREATE OR REPLACE FUNCTION ordered_job_replay(p_id bigint, p_force boolean) RETURNS void
LANGUAGE plpgsql AS $$
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
    PERFORM pg_notify('ordered_jobs', current_schema());
END
$$;

-- ordered_job_skip now answers whether it released the key: false for a failed job that held
-- nothing (failed under the skip policy, or skipped before), which it leaves as it is. Callers
-- that ignore the answer (Exec) are unaffected by the new return type.
DROP FUNCTION ordered_job_skip(bigint);
CREATE FUNCTION ordered_job_skip(p_id bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
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
