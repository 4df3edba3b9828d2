-- ordered_enqueue_one enqueues one event in the default mode for the Go client, which has
-- validated it and applied its defaults (kind, payload, max_attempts): the path of a single
-- Enqueue, often inside a request's transaction. It returns the event's job and whether the
-- event was a duplicate, as ordered_enqueue_events does for it (id null: archived).
--
-- An event above everything its key ever had (an append, or a new key) is two statements: the
-- key row's upsert, which writes the row only when the event is above seq_max (and so orders
-- the key's enqueues by their commits, as ordered_enqueue_events does), and the insert. Then
-- no job of the key has its seq or a higher one, so it is no duplicate and not late, and it is
-- the head exactly when the key has none. Any other event, and an event of a contiguous key
-- (which ordered_enqueue_events refuses: ORD08), goes through ordered_enqueue_events, with the
-- key row locked by the upsert.
--
-- It has no SET clauses, unlike the batch functions, so that calling it costs no more than its
-- two statements: their plans are the same, one index probe each, whatever the settings.
CREATE OR REPLACE FUNCTION ordered_enqueue_one(p_key text, p_seq bigint, p_kind text, p_payload jsonb,
                                               p_run_at timestamptz, p_max_attempts integer,
                                               p_max_key_bytes integer,
                                               OUT id bigint, OUT duplicate boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    v_next_seq bigint;
    v_wake boolean;
BEGIN
    INSERT INTO ordered_keys AS k (key, seq_max) VALUES (p_key, p_seq)
    ON CONFLICT (key) DO UPDATE SET seq_max = excluded.seq_max WHERE k.seq_max < excluded.seq_max
    RETURNING k.next_seq INTO v_next_seq;
    IF NOT FOUND OR v_next_seq IS NOT NULL THEN
        SELECT e.id, e.duplicate INTO id, duplicate
        FROM ordered_enqueue_events(ARRAY[ROW(p_key, p_seq, p_kind, p_payload, p_run_at, p_max_attempts)::ordered_event],
                                    p_max_key_bytes, NULL, p_max_attempts) AS e;
        RETURN;
    END IF;

    -- A caller that keeps one snapshot locks the head it sees (see ordered_enqueue_events).
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM 1 FROM ordered_jobs AS j WHERE j.key = p_key AND j.head FOR SHARE OF j;
    END IF;
    INSERT INTO ordered_jobs AS j (key, seq, kind, payload, available_at, max_attempts, run_at, head)
    VALUES (p_key, p_seq, p_kind, p_payload, coalesce(p_run_at, now()), p_max_attempts, p_run_at,
            NOT EXISTS (SELECT 1 FROM ordered_jobs AS h WHERE h.key = p_key AND h.head))
    RETURNING j.id, j.head AND j.available_at <= statement_timestamp() INTO id, v_wake;
    duplicate := false;
    IF v_wake THEN
        PERFORM pg_notify('ordered_jobs', current_schema());
    END IF;
END
$$;
COMMENT ON FUNCTION ordered_enqueue_one(text, bigint, text, jsonb, timestamptz, integer, integer) IS
'Internal to ordered: the Go client''s path for one event in the default mode, validated by the client. Not an interface to call, and it may change in any release; producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
