-- ordered_batch_end ends the batch that the job of p_key at p_seq led (its batch_to was
-- p_batch_to) when that job stops running other than by completing (given back, retried,
-- failed, or its lease expired): the batch's later jobs, still queued and claimed only through
-- it (ordered_jobs_extend), get their claim versions raised, so that the batch's claims of them
-- are fenced and a later claim never hands the same version out again. A crashed batch's
-- (p_crashed) are marked as its claim would have left them instead: their attempt counted,
-- their claim version raised, and the batch's expired lease p_lease_until recorded
-- (crash_lease_until), so that each becomes its key's head as a running claim whose lease has
-- expired and is recovered alone in its turn (a job that kills its worker spends only its own
-- attempts).
CREATE OR REPLACE FUNCTION ordered_batch_end(p_key text, p_seq bigint, p_batch_to bigint,
                                             p_crashed boolean, p_lease_until timestamptz,
                                             p_attempted_at timestamptz, p_claimed_by text)
RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
BEGIN
    IF p_batch_to IS NULL OR p_batch_to <= p_seq THEN
        RETURN;
    END IF;
    IF p_crashed THEN
        UPDATE ordered_jobs AS m
        SET attempts = m.attempts + 1, claim_version = m.claim_version + 1,
            claimed_by = p_claimed_by, crash_lease_until = p_lease_until, attempted_at = p_attempted_at
        WHERE m.key = p_key AND m.seq > p_seq AND m.seq <= p_batch_to AND m.status = 'queued';
    ELSE
        UPDATE ordered_jobs AS m
        SET claim_version = m.claim_version + 1
        WHERE m.key = p_key AND m.seq > p_seq AND m.seq <= p_batch_to AND m.status = 'queued';
    END IF;
END
$$;
COMMENT ON FUNCTION ordered_batch_end(text, bigint, bigint, boolean, timestamptz, timestamptz, text) IS
'Internal to ordered: ends a batch whose first job stopped running other than by completing (workers, Client.Retry, Fail, ReleaseBatch). Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
