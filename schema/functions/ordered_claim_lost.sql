-- ordered_claim_lost raises ORD06 for the claim p_version of job p_id, which aborts the
-- caller's transaction. A fenced write in the caller's transaction (RetryTx, FailTx) that finds
-- the claim lost calls it, so that nothing written beside it can commit, even when the caller
-- ignores the error and commits (PostgreSQL answers that COMMIT with a ROLLBACK).
CREATE OR REPLACE FUNCTION ordered_claim_lost(p_id bigint, p_version bigint) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION 'ordered: lease lost: claim % of job % is no longer current (its lease expired or the job was claimed again)',
        p_version, p_id USING ERRCODE = 'ORD06';
END
$$;
COMMENT ON FUNCTION ordered_claim_lost(bigint, bigint) IS
'Internal to ordered: aborts the caller''s transaction with ORD06 when a fenced write of RetryTx or FailTx finds its claim lost. Called by the Go library; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
