-- ordered_job_require_failed raises ORD04 unless job p_id exists and has failed, naming which
-- of the two it is not: replay and skip say why they refuse a job, with its status as the
-- inspection calls show it (running while its head, or a batch, holds a claim on it).
CREATE OR REPLACE FUNCTION ordered_job_require_failed(p_id bigint) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_status text;
BEGIN
    SELECT j.status INTO v_status FROM ordered_jobs_now AS j WHERE j.id = p_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'ordered: job % does not exist', p_id USING ERRCODE = 'ORD04';
    END IF;
    IF v_status NOT IN ('failed', 'blocked') THEN
        RAISE EXCEPTION 'ordered: job % is %, not failed', p_id, v_status USING ERRCODE = 'ORD04';
    END IF;
END
$$;
COMMENT ON FUNCTION ordered_job_require_failed(bigint) IS
'Internal to ordered: says why replay or skip refuses a job. Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
