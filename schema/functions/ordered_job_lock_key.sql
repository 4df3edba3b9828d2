-- ordered_job_lock_key locks the key row of a job before its head or job rows are touched (key,
-- then head and job: the same order as enqueue, so the two never deadlock) and returns the
-- job's key and seq. Settlements take it FOR NO KEY UPDATE, as the completion does. p_exclusive
-- is for admin operations (replay, skip), which move the key's head: they write the key row,
-- not only lock it, so that a REPEATABLE READ or SERIALIZABLE caller whose snapshot predates
-- the move meets a serialization error at the key row (settlements lock it, enqueuers upsert
-- it) instead of computing heads from that snapshot.
CREATE OR REPLACE FUNCTION ordered_job_lock_key(p_id bigint, p_exclusive boolean,
                                                OUT o_key text, OUT o_seq bigint)
LANGUAGE plpgsql
AS $$
BEGIN
    SELECT j.key, j.seq INTO o_key, o_seq FROM ordered_jobs AS j WHERE j.id = p_id;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_exclusive THEN
        -- The same lock as FOR NO KEY UPDATE, and a new row version.
        UPDATE ordered_keys AS k SET seq_max = k.seq_max WHERE k.key = o_key;
    ELSE
        PERFORM 1 FROM ordered_keys AS k WHERE k.key = o_key FOR NO KEY UPDATE;
    END IF;
END
$$;
COMMENT ON FUNCTION ordered_job_lock_key(bigint, boolean) IS
'Internal to ordered: locks the key row of a job before the job (replay, skip, fail). Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
