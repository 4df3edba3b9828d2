-- ordered_enqueue_append_prepare readies a batch of appends that the Go client then writes with
-- COPY, in the same transaction: the fast path of a large batch in the default mode. The batch
-- is described by its keys, each once and in the order the client writes their events (the
-- events of p_keys[1] first, in seq order, then those of p_keys[2], ...), with the lowest and
-- highest seq of their events, the run_at and max_attempts of their lowest event, and how many
-- events they have; all validated and distinct by the client's rules.
--
-- It writes the key rows, as ordered_enqueue_events does (in key order; the write is what makes
-- a REPEATABLE READ caller with a stale snapshot fail), then, with a fresh snapshot, checks that
-- every event is an append: its key is in the default mode, and its lowest event is above the
-- key's archived history and above every job the key has. Then no event is a duplicate or late,
-- and the lowest event of a key with no head row (no open job) is its head. When that holds it
-- returns p_events new job ids, the i-th for the i-th event the client writes, and the
-- transaction's now(), tx_now (available_at of an event without run_at); it writes the head
-- rows of the keys that had none, for the ids their lowest events get, and sends the wake-up if
-- one is ready. Otherwise it returns appends = false and nothing else; the caller sends the
-- batch through ordered_enqueue_events instead, which finds what the events are (the key rows
-- stay locked).
CREATE OR REPLACE FUNCTION ordered_enqueue_append_prepare(p_keys text[], p_seq_mins bigint[],
                                                          p_seq_maxs bigint[], p_run_ats timestamptz[],
                                                          p_max_attempts integer[], p_counts integer[],
                                                          p_events integer,
                                                          OUT appends boolean, OUT ids bigint[],
                                                          OUT tx_now timestamptz)
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
        PERFORM 1 FROM ordered_heads AS h WHERE h.key = ANY (p_keys) FOR SHARE;
    END IF;

    -- One probe of the (key, seq) index a key: any job at or above its lowest event.
    IF EXISTS (SELECT 1 FROM unnest(p_keys, p_seq_mins) AS b(key, seq_min)
               WHERE EXISTS (SELECT 1 FROM ordered_jobs AS o WHERE o.key = b.key AND o.seq >= b.seq_min)) THEN
        RETURN;
    END IF;

    v_ids := pg_get_serial_sequence('ordered_jobs', 'id')::regclass;
    ids := ARRAY(SELECT nextval(v_ids) FROM generate_series(1, p_events));
    tx_now := now();
    appends := true;

    -- The heads of the keys that have none: the head's unique key decides, as for a single
    -- append (ordered/internal/store/queries/job_enqueue_one.sql). Each points at the id its
    -- key's lowest event gets.
    WITH heads AS (
        INSERT INTO ordered_heads AS h (key, job_id, seq, state, available_at, claim_version, attempts,
                                        max_attempts, closed_to)
        SELECT b.key, ids[b.first], b.seq_min, 'queued', coalesce(b.run_at, tx_now), 0, 0, b.max_attempts,
               coalesce((SELECT c.seq FROM ordered_jobs AS c WHERE c.key = b.key AND c.seq < b.seq_min
                         ORDER BY c.seq DESC LIMIT 1), -1)
        FROM (SELECT u.key, u.seq_min, u.run_at, u.max_attempts,
                     (sum(u.n) OVER (ORDER BY u.ord) - u.n + 1)::integer AS first
              FROM unnest(p_keys, p_seq_mins, p_run_ats, p_max_attempts, p_counts)
                       WITH ORDINALITY AS u(key, seq_min, run_at, max_attempts, n, ord)) AS b
        ORDER BY b.key
        ON CONFLICT (key) DO NOTHING
        RETURNING h.available_at <= statement_timestamp() AS ready
    )
    SELECT bool_or(h.ready) INTO v_wake FROM heads AS h;
    IF v_wake THEN
        PERFORM pg_notify('ordered_jobs', current_schema());
    END IF;
END
$$;
COMMENT ON FUNCTION ordered_enqueue_append_prepare(text[], bigint[], bigint[], timestamptz[], integer[], integer[], integer) IS
'Internal to ordered: the Go client''s fast path for large batches of appends, which it then writes with COPY. Not an interface to call, and it may change in any release; producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
