-- ordered_job_complete completes one claim inside the caller's transaction (CompleteTx): one
-- call of ordered_jobs_complete. When the claim is no longer current it raises ORD06, so the
-- transaction is aborted: an effect written beside the completion can never commit without
-- it, even when the caller ignores the error and commits (PostgreSQL answers that COMMIT with
-- a ROLLBACK).
CREATE OR REPLACE FUNCTION ordered_job_complete(p_id bigint, p_version bigint) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM ordered_jobs_complete(ARRAY[p_id], ARRAY[p_version]) AS c
                   WHERE c.completed) THEN
        RAISE EXCEPTION 'ordered: lease lost: claim % of job % is no longer current (its lease expired or the job was claimed again)',
            p_version, p_id USING ERRCODE = 'ORD06';
    END IF;
END
$$;
COMMENT ON FUNCTION ordered_job_complete(bigint, bigint) IS
'Internal to ordered: completes a claim inside the caller''s transaction (Client.CompleteTx). Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
