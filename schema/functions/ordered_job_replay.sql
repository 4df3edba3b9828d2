-- ordered_job_replay queues a failed job again with its attempts reset. If a later job of its
-- key has already started, the replay would run out of order: it raises ORD02 unless p_force.
-- A later job that a crashed batch left marked (crash_lease_until) has started: its lease has
-- expired, and it becomes the head, to be recovered, only once the jobs below it have settled,
-- so it is no reason to wait. It always raises ORD03 while a later job of the key is running
-- or is held by a running batch (the running head's batch_to above this job).
-- ORD04: no such failed job. It locks the key's head row before it checks the later jobs, so
-- that a claim or retry (which do not wait for the key row) cannot change the head between
-- the checks and the move of the head.
CREATE OR REPLACE FUNCTION ordered_job_replay(p_id bigint, p_force boolean) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_key text;
    v_seq bigint;
    h ordered_heads;
    f record;
    v_closed_above bigint;
BEGIN
    SELECT o_key, o_seq INTO v_key, v_seq FROM ordered_job_lock_key(p_id, true);
    PERFORM ordered_job_require_failed(p_id);
    SELECT o.* INTO h FROM ordered_heads AS o WHERE o.key = v_key FOR NO KEY UPDATE;
    IF h.state = 'running' AND (h.seq > v_seq OR h.batch_to > v_seq) THEN
        RAISE EXCEPTION 'ordered: job % cannot be replayed while a later job of key % is running',
            p_id, v_key USING ERRCODE = 'ORD03';
    END IF;
    -- A later job has started or finished: the first job above tells (as for a late event, see
    -- ordered_enqueue_events), or a forced replay's finished jobs above the head, or the key's
    -- archived seq (archival deletes done jobs above a failed one), or a crashed batch's mark.
    SELECT j.id, j.seq, j.status, j.attempted_at INTO f FROM ordered_jobs AS j
    WHERE j.key = v_key AND j.seq > v_seq ORDER BY j.seq LIMIT 1;
    IF NOT p_force AND (
            f.status <> 'queued' OR f.attempted_at IS NOT NULL
         OR (f.id = h.job_id AND (h.state <> 'queued' OR h.attempted_at IS NOT NULL))
         OR h.closed_above > v_seq
         OR (SELECT k.archived_seq FROM ordered_keys AS k WHERE k.key = v_key) > v_seq
         OR EXISTS (SELECT 1 FROM ordered_jobs AS c
                    WHERE c.key = v_key AND c.seq > v_seq AND c.crash_lease_until IS NOT NULL)) THEN
        RAISE EXCEPTION 'ordered: replaying job % would run it after later jobs of key % (force to replay anyway)',
            p_id, v_key USING ERRCODE = 'ORD02';
    END IF;
    UPDATE ordered_jobs
    SET status = 'queued', attempts = 0, available_at = now(), finished_at = NULL, failed_at = NULL
    WHERE id = p_id;
    IF h.job_id = p_id THEN
        -- the blocked head itself
        UPDATE ordered_heads AS o SET state = 'queued', attempts = 0, available_at = now()
        WHERE o.key = v_key;
    ELSE
        -- The highest finished job above it, if any, makes the events below it late. A key
        -- without a head has finished every job but, when it is contiguous and waits on a gap,
        -- the jobs queued above the gap, which have not started.
        v_closed_above := CASE WHEN h.key IS NULL
                               THEN (SELECT c.seq FROM ordered_jobs AS c
                                     WHERE c.key = v_key AND c.status IN ('done', 'failed')
                                     ORDER BY c.seq DESC LIMIT 1)
                               ELSE greatest(h.closed_above, h.closed_to) END;
        PERFORM ordered_heads_refresh(ARRAY[v_key], v_seq, false,
                                      CASE WHEN v_closed_above > v_seq THEN v_closed_above END);
    END IF;
    PERFORM pg_notify('ordered_jobs', current_schema());
END
$$;
COMMENT ON FUNCTION ordered_job_replay(bigint, boolean) IS
'Internal to ordered: queues a failed job again (ordered replay, Client.Replay). Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
