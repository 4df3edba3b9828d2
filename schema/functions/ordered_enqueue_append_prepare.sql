-- ordered_enqueue_append_prepare readies a batch of appends that the Go client then writes with
-- COPY, in the same transaction: the fast path of a large batch in the default mode. The batch
-- is described by its keys (each once, with the lowest and highest seq of its events, and the
-- run_at of its lowest event) and its number of events, all validated and distinct by the
-- client's rules.
--
-- It writes the key rows, as ordered_enqueue_events does (in key order; the write is what makes
-- a REPEATABLE READ caller with a stale snapshot fail), then, with a fresh snapshot, checks that
-- every event is an append: its key is in the default mode, and its lowest event is above the
-- key's archived history and above every job the key has. Then no event is a duplicate or late,
-- and the lowest event of a key with no open job is its head. When that holds it returns, per
-- key, whether it has an open job (open[i]), p_events new job ids, and the transaction's now(), tx_now
-- (available_at of an event without run_at), and it sends the wake-up if a new head is ready.
-- Otherwise it returns appends = false and nothing else; the caller sends the batch through
-- ordered_enqueue_events instead, which finds what the events are (the key rows stay locked).
CREATE OR REPLACE FUNCTION ordered_enqueue_append_prepare(p_keys text[], p_seq_mins bigint[],
                                                          p_seq_maxs bigint[], p_run_ats timestamptz[],
                                                          p_events integer,
                                                          OUT appends boolean, OUT open boolean[],
                                                          OUT ids bigint[], OUT tx_now timestamptz)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_refused boolean;
    v_wake boolean;
    v_ids regclass;
BEGIN
    WITH l AS (
        INSERT INTO ordered_keys AS k (key, seq_max)
        SELECT b.key, b.seq_max FROM unnest(p_keys, p_seq_maxs) AS b(key, seq_max) ORDER BY b.key
        ON CONFLICT (key) DO UPDATE SET seq_max = greatest(k.seq_max, excluded.seq_max)
        RETURNING k.key, k.archived_seq, k.next_seq)
    SELECT bool_or(l.next_seq IS NOT NULL OR b.seq_min <= l.archived_seq)
    INTO v_refused
    FROM l JOIN unnest(p_keys, p_seq_mins) AS b(key, seq_min) ON b.key = l.key;
    appends := false;
    IF v_refused THEN
        RETURN;
    END IF;

    -- A caller that keeps one snapshot locks the heads it sees (see ordered_enqueue_events).
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM 1 FROM ordered_jobs AS j WHERE j.head AND j.key = ANY (p_keys) FOR SHARE OF j;
    END IF;

    -- One probe of each (key, seq) index a key: its highest open job and any finished job at or
    -- above its lowest event.
    SELECT array_agg(o.seq IS NOT NULL ORDER BY b.ord),
           bool_or(o.seq >= b.seq_min OR c.found),
           bool_or(o.seq IS NULL AND coalesce(b.run_at <= statement_timestamp(), true))
    INTO open, v_refused, v_wake
    FROM unnest(p_keys, p_seq_mins, p_run_ats) WITH ORDINALITY AS b(key, seq_min, run_at, ord)
    LEFT JOIN LATERAL (
        SELECT o.seq FROM ordered_jobs AS o
        WHERE o.key = b.key AND o.status IN ('queued', 'running', 'blocked')
        ORDER BY o.seq DESC LIMIT 1) AS o ON true
    CROSS JOIN LATERAL (
        SELECT EXISTS (SELECT 1 FROM ordered_jobs AS c
                       WHERE c.key = b.key AND c.seq >= b.seq_min AND c.status IN ('done', 'failed')) AS found) AS c;
    IF v_refused THEN
        open := NULL;
        RETURN;
    END IF;

    v_ids := pg_get_serial_sequence('ordered_jobs', 'id')::regclass;
    ids := ARRAY(SELECT nextval(v_ids) FROM generate_series(1, p_events));
    tx_now := now();
    appends := true;
    IF v_wake THEN
        PERFORM pg_notify('ordered_jobs', current_schema());
    END IF;
END
$$;
COMMENT ON FUNCTION ordered_enqueue_append_prepare(text[], bigint[], bigint[], timestamptz[], integer) IS
'Internal to ordered: the Go client''s fast path for large batches of appends, which it then writes with COPY. Not an interface to call, and it may change in any release; producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
