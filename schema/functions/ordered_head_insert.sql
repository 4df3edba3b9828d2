-- ordered_head_insert makes a key's newly enqueued job its head if the key has none (no open
-- job), and returns true. The head's unique key decides that, by the rows committed and in
-- flight, not by the caller's snapshot. closed_to is the key's job below, which has finished
-- when the key has no head. A new head claimable now wakes idle workers (NOTIFY, delivered at
-- commit). The single enqueue calls it with the key row held when it sees no head, or one
-- that may be gone (ordered/internal/store/queries/job_enqueue_one.sql): as a function, its
-- insert is set up only when it runs, where a statement's own insert is set up on every
-- execution. The single-event path of ordered_enqueue_events calls it always.
CREATE OR REPLACE FUNCTION ordered_head_insert(p_key text, p_job_id bigint, p_seq bigint,
                                               p_available_at timestamptz, p_max_attempts integer)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
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
