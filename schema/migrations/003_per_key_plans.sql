-- Plans that stay per key at any table size. PL/pgSQL may plan these statements once for any
-- batch (a generic plan cannot know how many keys or events an array holds), and where a
-- per-key lookup could be pulled up into a join, the planner was free to hash-join the batch
-- against every head or every job. Each lookup is now fenced (OFFSET 0 keeps it a
-- parameterised index probe per key or event), and each update reaches its rows through the
-- primary key. The bodies are otherwise those of 001_queue.sql.

CREATE OR REPLACE FUNCTION ordered_heads_refresh(p_keys text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_late record;
BEGIN
    -- Every lookup is per key (LATERAL; OFFSET 0 keeps the planner from turning one into a
    -- join over every head), through ordered_jobs_heads and ordered_jobs_open, and the updates
    -- reach their rows through the primary key, so the cost is a few index probes per key
    -- whatever the size of the table and whatever the planner guesses of p_keys.
    UPDATE ordered_jobs AS j
    SET head = false
    WHERE j.id = ANY (ARRAY(
        SELECT cur.id
        FROM unnest(p_keys) AS k(key)
        CROSS JOIN LATERAL (
            SELECT h.id FROM ordered_jobs AS h WHERE h.key = k.key AND h.head OFFSET 0) AS cur
        LEFT JOIN LATERAL (
            SELECT o.id FROM ordered_jobs AS o
            WHERE o.key = k.key AND o.status IN ('queued', 'running', 'blocked')
            ORDER BY o.seq LIMIT 1) AS lowest ON true
        WHERE cur.id IS DISTINCT FROM lowest.id))
      AND j.head
      AND j.status <> 'running';

    -- A fresh snapshot (READ COMMITTED): sees a claim that committed while the update above
    -- waited for its row. The claim's own NOT EXISTS guard is not re-checked against newer
    -- data; what keeps it from taking a demoted head is that the head's row stays locked by
    -- the update above until this transaction commits, and then carries head = false.
    SELECT k.key, h.seq AS later_seq, lowest.seq INTO v_late
    FROM unnest(p_keys) AS k(key)
    CROSS JOIN LATERAL (
        SELECT h.id, h.seq FROM ordered_jobs AS h WHERE h.key = k.key AND h.head OFFSET 0) AS h
    CROSS JOIN LATERAL (
        SELECT o.id, o.seq FROM ordered_jobs AS o
        WHERE o.key = k.key AND o.status IN ('queued', 'running', 'blocked')
        ORDER BY o.seq LIMIT 1) AS lowest
    WHERE h.id <> lowest.id
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ordered: late event: key % seq % is below seq % that has already started',
            v_late.key, v_late.seq, v_late.later_seq
            USING ERRCODE = 'ORD01',
                  DETAIL = json_build_object('key', v_late.key, 'seq', v_late.seq,
                                             'later_seq', v_late.later_seq)::text;
    END IF;

    UPDATE ordered_jobs AS j
    SET head = true
    WHERE j.id = ANY (ARRAY(
        SELECT lowest.id
        FROM unnest(p_keys) AS k(key)
        CROSS JOIN LATERAL (
            SELECT o.id FROM ordered_jobs AS o
            WHERE o.key = k.key AND o.status IN ('queued', 'running', 'blocked')
            ORDER BY o.seq LIMIT 1) AS lowest))
      AND NOT j.head;
END
$$;

CREATE OR REPLACE FUNCTION ordered_enqueue(p_events jsonb)
RETURNS TABLE (ord integer, id bigint, duplicate boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_events ordered_event[];
    v_late record;
    v_keys text[];
BEGIN
    v_events := ARRAY(
        SELECT ROW(e.ord, e.v->>'key', (e.v->>'seq')::bigint, coalesce(e.v->>'kind', ''),
                   coalesce(e.v->'payload', 'null'::jsonb), (e.v->>'run_at')::timestamptz,
                   (e.v->>'max_attempts')::integer, NULL)::ordered_event
        FROM jsonb_array_elements(p_events) WITH ORDINALITY AS e(v, ord)
        ORDER BY e.ord);

    -- Lock the keys in a fixed order (no deadlocks between batches). It must always write the
    -- row, never only lock it: that is what makes a REPEATABLE READ or SERIALIZABLE caller with
    -- a stale snapshot fail with a serialization error instead of computing heads from it.
    INSERT INTO ordered_keys AS k (key, seq_max)
    SELECT b.key, max(b.seq) FROM unnest(v_events) AS b GROUP BY b.key ORDER BY b.key
    ON CONFLICT (key) DO UPDATE SET seq_max = greatest(k.seq_max, excluded.seq_max);

    -- A caller that keeps one snapshot must not compute heads from a stale one: lock the heads
    -- its snapshot sees, which raises a serialization error if any changed since.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM 1 FROM ordered_jobs AS j
        WHERE j.head AND j.key IN (SELECT DISTINCT b.key FROM unnest(v_events) AS b)
        FOR SHARE OF j;
    END IF;

    -- From here on every statement sees all committed jobs of these keys (READ COMMITTED).
    v_events := ARRAY(
        SELECT ROW(b.ord, b.key, b.seq, b.kind, b.payload, b.run_at, b.max_attempts, j.id)::ordered_event
        FROM unnest(v_events) AS b
        LEFT JOIN LATERAL (
            SELECT j.id FROM ordered_jobs AS j WHERE j.seq = b.seq AND j.key = b.key OFFSET 0) AS j
            ON true
        ORDER BY b.ord);

    -- Late: a later job of the key finished, or the first later open job has started (jobs
    -- start in seq order, so if that one has not, no later open job has). attempted_at, not
    -- attempts, marks a start: a replay resets the attempts of a job that did run.
    SELECT b.key, b.seq, coalesce(closed.seq, open.seq) AS later_seq INTO v_late
    FROM unnest(v_events) AS b
    CROSS JOIN LATERAL (
        SELECT k.archived_seq FROM ordered_keys AS k WHERE k.key = b.key OFFSET 0) AS k
    LEFT JOIN LATERAL (
        SELECT j.seq FROM ordered_jobs AS j
        WHERE j.key = b.key AND j.seq > b.seq AND j.status IN ('done', 'failed')
        ORDER BY j.seq LIMIT 1
    ) AS closed ON true
    LEFT JOIN LATERAL (
        SELECT j.seq, j.status, j.attempted_at FROM ordered_jobs AS j
        WHERE j.key = b.key AND j.seq > b.seq AND j.status IN ('queued', 'running', 'blocked')
        ORDER BY j.seq LIMIT 1
    ) AS open ON true
    WHERE b.existing_id IS NULL
      AND (b.seq <= k.archived_seq OR closed.seq IS NOT NULL
           OR open.status <> 'queued' OR open.attempted_at IS NOT NULL)
    ORDER BY b.ord
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ordered: late event: key % seq % is below a job of that key that has already started',
            v_late.key, v_late.seq
            USING ERRCODE = 'ORD01',
                  DETAIL = json_build_object('key', v_late.key, 'seq', v_late.seq,
                                             'later_seq', v_late.later_seq)::text;
    END IF;

    INSERT INTO ordered_jobs (key, seq, kind, payload, available_at, max_attempts)
    SELECT b.key, b.seq, b.kind, b.payload, coalesce(b.run_at, now()), b.max_attempts
    FROM unnest(v_events) AS b
    WHERE b.existing_id IS NULL
    ORDER BY b.key, b.seq;

    SELECT array_agg(DISTINCT b.key) INTO v_keys
    FROM unnest(v_events) AS b WHERE b.existing_id IS NULL;
    IF v_keys IS NOT NULL THEN
        PERFORM ordered_heads_refresh(v_keys);
    END IF;

    -- One wake-up per batch, delivered at commit, and only if the batch made a job claimable
    -- now: a job queued behind an open one is started by whoever finishes that one, and a
    -- NOTIFY serialises commits (a global lock at commit), so appends to busy keys skip it.
    -- The payload lets listeners of other schemas in the same database ignore it.
    IF v_keys IS NOT NULL AND EXISTS (
            SELECT 1 FROM unnest(v_events) AS b
            CROSS JOIN LATERAL (
                SELECT j.head, j.status, j.available_at FROM ordered_jobs AS j
                WHERE j.seq = b.seq AND j.key = b.key OFFSET 0) AS j
            WHERE b.existing_id IS NULL AND j.head AND j.status = 'queued'
              AND j.available_at <= statement_timestamp()) THEN
        PERFORM pg_notify('ordered_jobs', current_schema());
    END IF;

    RETURN QUERY
    SELECT b.ord, coalesce(b.existing_id, j.id), b.existing_id IS NOT NULL
    FROM unnest(v_events) AS b
    LEFT JOIN LATERAL (
        SELECT j.id FROM ordered_jobs AS j
        WHERE b.existing_id IS NULL AND j.seq = b.seq AND j.key = b.key OFFSET 0) AS j ON true
    ORDER BY b.ord;
END
$$;

-- With every lookup fenced, the generic plan is the right one for any batch size; planning
-- each call afresh (custom plans) was most of a single-event enqueue's time.
ALTER FUNCTION ordered_heads_refresh(text[]) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION ordered_enqueue(jsonb) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION ordered_jobs_complete(bigint[], bigint[], integer, interval)
    SET plan_cache_mode = force_generic_plan;
