-- ordered_head_insert makes a key's newly enqueued job its head if the key has none (no open
-- job), and returns true. The caller holds the key row, and whatever deletes a head holds it
-- too, so a head the probe below finds stays until the caller commits. In READ COMMITTED each
-- query here takes a snapshot of its own (the function is VOLATILE: keep it so), after the key
-- row was taken, so the probe sees a head deleted since the caller's statement began. A caller
-- at another level keeps one snapshot: the probe locks the head that snapshot shows, so a head
-- claimed, moved or gone since fails the transaction with a serialization error. A key with a
-- head is the common case and costs one probe. Else the head's unique key decides, by the rows
-- committed and in flight (a committed head that a REPEATABLE READ snapshot misses raises a
-- serialization error); closed_to is the key's job below, which has finished when the key has
-- no head. A new head claimable now wakes idle workers (NOTIFY, delivered at commit). As a
-- function, the insert is set up only when it runs, where a statement's own insert is set up
-- on every execution.
CREATE OR REPLACE FUNCTION ordered_head_insert(p_key text, p_job_id bigint, p_seq bigint,
                                               p_available_at timestamptz, p_max_attempts integer)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
AS $$
BEGIN
    IF current_setting('transaction_isolation') = 'read committed' THEN
        IF EXISTS (SELECT FROM ordered_heads WHERE key = p_key) THEN
            RETURN true;
        END IF;
    ELSE
        PERFORM FROM ordered_heads WHERE key = p_key FOR SHARE;
        IF FOUND THEN
            RETURN true;
        END IF;
    END IF;
    INSERT INTO ordered_heads (key, job_id, seq, state, available_at, claim_version, attempts,
                               max_attempts, closed_to)
    VALUES (p_key, p_job_id, p_seq, 'queued', p_available_at, 0, 0, p_max_attempts,
            coalesce((SELECT c.seq FROM ordered_jobs AS c WHERE c.key = p_key AND c.seq < p_seq
                      ORDER BY c.seq DESC LIMIT 1), -1))
    ON CONFLICT (key) DO NOTHING;
    IF FOUND AND p_available_at <= statement_timestamp() THEN
        PERFORM pg_notify('ordered_jobs', current_schema());
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION ordered_head_insert(text, bigint, bigint, timestamptz, integer) IS
'Internal to ordered: the head of a key a single enqueue gave its first open job. Called by the Go library and ordered_enqueue_events; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
