-- Bulk enqueue without JSON. A batch now arrives as typed arrays, one per column, in the
-- binary protocol (job_enqueue_many.sql); the JSON form stays for database/sql callers. The
-- work of an enqueue moves into ordered_enqueue_events, which both forms call, and two of its
-- checks become per key instead of per event:
--   * late: if any new event of a key is late, the key's lowest new event is too (whatever
--     finished or started above the one is above the other), so only that one is checked;
--   * wake-up: only a key's lowest new event can have become its head.

CREATE FUNCTION ordered_enqueue_events(p_events ordered_event[])
RETURNS TABLE (ord integer, id bigint, duplicate boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_events ordered_event[] := p_events;
    v_late record;
    v_keys text[];
BEGIN
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
    -- attempts, marks a start: a replay resets the attempts of a job that did run. Checked
    -- for each key's lowest new event, which is late if any new event of the key is.
    SELECT b.key, b.seq, coalesce(closed.seq, open.seq) AS later_seq INTO v_late
    FROM (SELECT DISTINCT ON (e.key) e.key, e.seq, e.ord
          FROM unnest(v_events) AS e
          WHERE e.existing_id IS NULL
          ORDER BY e.key, e.seq) AS b
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
    WHERE b.seq <= k.archived_seq OR closed.seq IS NOT NULL
       OR open.status <> 'queued' OR open.attempted_at IS NOT NULL
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
    IF v_keys IS NULL THEN
        RETURN QUERY SELECT b.ord, b.existing_id, true FROM unnest(v_events) AS b ORDER BY b.ord;
        RETURN;
    END IF;
    PERFORM ordered_heads_refresh(v_keys);

    -- One wake-up per batch, delivered at commit, and only if the batch made a job claimable
    -- now: a job queued behind an open one is started by whoever finishes that one, and a
    -- NOTIFY serialises commits (a global lock at commit), so appends to busy keys skip it.
    -- The payload lets listeners of other schemas in the same database ignore it.
    IF EXISTS (
            SELECT 1
            FROM (SELECT e.key, min(e.seq) AS seq FROM unnest(v_events) AS e
                  WHERE e.existing_id IS NULL GROUP BY e.key) AS b
            CROSS JOIN LATERAL (
                SELECT h.seq, h.status, h.available_at FROM ordered_jobs AS h
                WHERE h.key = b.key AND h.head OFFSET 0) AS h
            WHERE h.seq = b.seq AND h.status = 'queued'
              AND h.available_at <= statement_timestamp()) THEN
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

-- The JSON form: decodes the batch and hands it on.
CREATE OR REPLACE FUNCTION ordered_enqueue(p_events jsonb)
RETURNS TABLE (ord integer, id bigint, duplicate boolean)
LANGUAGE sql AS $$
    SELECT e.ord, e.id, e.duplicate
    FROM ordered_enqueue_events(ARRAY(
        SELECT ROW(e.ord, e.v->>'key', (e.v->>'seq')::bigint, coalesce(e.v->>'kind', ''),
                   coalesce(e.v->'payload', 'null'::jsonb), (e.v->>'run_at')::timestamptz,
                   (e.v->>'max_attempts')::integer, NULL)::ordered_event
        FROM jsonb_array_elements(p_events) WITH ORDINALITY AS e(v, ord)
        ORDER BY e.ord)) AS e
$$;
