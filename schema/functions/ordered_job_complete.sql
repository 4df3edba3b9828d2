-- ordered_job_complete completes one claim: a batch of one of ordered_jobs_complete.
CREATE OR REPLACE FUNCTION ordered_job_complete(p_id bigint, p_version bigint) RETURNS boolean
LANGUAGE sql
AS $$
    SELECT EXISTS (SELECT 1 FROM ordered_jobs_complete(ARRAY[p_id], ARRAY[p_version]) AS c
                   WHERE c.completed)
$$;
