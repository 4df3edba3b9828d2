-- ordered_archive deletes up to p_limit done jobs finished more than p_older_than ago, oldest
-- first, and records in their keys the highest seq archived, so an event at or below it is
-- still recognised. Jobs locked by another archiver are skipped, and key rows are locked in key
-- order, as enqueue locks them, so archivers and enqueuers never deadlock. It returns how many
-- jobs it deleted. Its plans are pinned to index scans: a queue table's statistics lag behind
-- its churn.
CREATE OR REPLACE FUNCTION ordered_archive(p_older_than interval, p_limit integer) RETURNS integer
LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_ids bigint[];
BEGIN
    SELECT array_agg(d.id) INTO v_ids FROM (
        SELECT j.id FROM ordered_jobs AS j
        WHERE j.status = 'done' AND j.finished_at < statement_timestamp() - p_older_than
        ORDER BY j.finished_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED) AS d;
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM 1 FROM ordered_keys AS k
    WHERE k.key IN (SELECT j.key FROM ordered_jobs AS j WHERE j.id = ANY (v_ids))
    ORDER BY k.key
    FOR NO KEY UPDATE;
    WITH deleted AS (
        DELETE FROM ordered_jobs AS j WHERE j.id = ANY (v_ids) RETURNING j.key, j.seq
    )
    UPDATE ordered_keys AS k
    SET archived_seq = greatest(k.archived_seq, d.seq)
    FROM (SELECT key, max(seq) AS seq FROM deleted GROUP BY key) AS d
    WHERE k.key = d.key;
    RETURN cardinality(v_ids);
END
$$;
COMMENT ON FUNCTION ordered_archive(interval, integer) IS
'Internal to ordered: deletes old done jobs in bounded batches (ordered archive, a worker''s maintenance). Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
