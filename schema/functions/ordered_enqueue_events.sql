-- ordered_enqueue_events inserts a batch of events, validated by the caller and each (key, seq)
-- at most once, in the order given. It returns one row per event: its position (ord), the job
-- id, and whether (key, seq) already existed (an idempotent no-op). A late event (seq below a
-- job of its key that has started or finished, or at or below the key's archived history)
-- raises ORD01 and nothing is written.
--
-- It checks its events for lateness twice: before the insert, and again after it moved heads,
-- for the heads its events went below. Claims do not wait for the key row an enqueue holds, so
-- a queued head can be claimed and given back for a retry between the first check and the
-- refresh; it has started by then, and the refresh (which keeps only running heads) demoted it.
-- Jobs must be written through this function only: it keeps (key, seq) unique across open and
-- finished jobs.
CREATE OR REPLACE FUNCTION ordered_enqueue_events(p_events ordered_event[])
RETURNS TABLE (ord integer, id bigint, duplicate boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_events ordered_event[] := p_events;
    v_late record;
    v_keys text[];
    v_new_keys text[];
    v_new_seqs bigint[];
    v_new_ids bigint[];
    v_old_heads bigint[];
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
    -- A job is open or finished, so one of the two indexes holds it.
    v_events := ARRAY(
        SELECT ROW(b.ord, b.key, b.seq, b.kind, b.payload, b.run_at, b.max_attempts, j.id)::ordered_event
        FROM unnest(v_events) AS b
        LEFT JOIN LATERAL (
            SELECT o.id FROM ordered_jobs AS o
            WHERE o.key = b.key AND o.seq = b.seq AND o.status IN ('queued', 'running', 'blocked')
            UNION ALL
            SELECT c.id FROM ordered_jobs AS c
            WHERE c.key = b.key AND c.seq = b.seq AND c.status IN ('done', 'failed')
            LIMIT 1) AS j ON true
        ORDER BY b.ord);

    -- Late: a later job of the key finished, or the first later open job has started (jobs
    -- start in seq order, so if that one has not, no later open job has). attempted_at, not
    -- attempts, marks a start: a replay resets the attempts of a job that did run. Checked
    -- for each key's lowest new event, which is late if any new event of the key is.
    -- later_seq names the job that started, or is null when only the archive makes it late.
    SELECT b.key, b.seq,
           coalesce(closed.seq, CASE WHEN open.status <> 'queued' OR open.attempted_at IS NOT NULL
                                     THEN open.seq END) AS later_seq
    INTO v_late
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

    WITH inserted AS (
        INSERT INTO ordered_jobs (key, seq, kind, payload, available_at, max_attempts)
        SELECT b.key, b.seq, b.kind, b.payload, coalesce(b.run_at, now()), b.max_attempts
        FROM unnest(v_events) AS b
        WHERE b.existing_id IS NULL
        ORDER BY b.key, b.seq
        RETURNING ordered_jobs.key, ordered_jobs.seq, ordered_jobs.id
    )
    SELECT array_agg(i.key), array_agg(i.seq), array_agg(i.id)
    INTO v_new_keys, v_new_seqs, v_new_ids
    FROM inserted AS i;
    IF v_new_ids IS NULL THEN
        RETURN QUERY SELECT b.ord, b.existing_id, true FROM unnest(v_events) AS b ORDER BY b.ord;
        RETURN;
    END IF;
    -- Only a key whose lowest new event comes before its head, or that has none (it was idle),
    -- can get a new head. Appending behind the head, the common case, changes no head and
    -- makes nothing claimable: neither the refresh nor the wake-up check runs for it. (The
    -- head is the key's lowest open job. While this transaction holds the key row, what else
    -- can change the key's jobs (claims, renewals, retries, give-backs) leaves the head where
    -- it is; a REPEATABLE READ caller meets a replay or skip at the key row.)
    SELECT array_agg(b.key), array_agg(h.id) FILTER (WHERE h.id IS NOT NULL)
    INTO v_keys, v_old_heads
    FROM (SELECT e.key, min(e.seq) AS seq FROM unnest(v_new_keys, v_new_seqs) AS e(key, seq)
          GROUP BY e.key) AS b
    LEFT JOIN LATERAL (
        SELECT h.id, h.seq FROM ordered_jobs AS h WHERE h.key = b.key AND h.head OFFSET 0) AS h ON true
    WHERE h.seq IS NULL OR h.seq > b.seq;
    IF v_keys IS NOT NULL THEN
        PERFORM ordered_heads_refresh(v_keys);

        -- The late check ran before the insert, and a claim does not wait for the key row: a
        -- head that was queued then may have been claimed and given back for a retry since
        -- (a handler that failed at once). It has started, and the refresh, which keeps only
        -- running heads, demoted it. So the heads the new events went below are read again:
        -- the refresh holds their rows now, so what this sees is final. A batch that went
        -- below no head (new or idle keys only) has nothing to read again.
        IF v_old_heads IS NOT NULL THEN
            SELECT j.key, j.seq AS later_seq,
                   (SELECT min(e.seq) FROM unnest(v_new_keys, v_new_seqs) AS e(key, seq)
                    WHERE e.key = j.key) AS seq
            INTO v_late
            FROM ordered_jobs AS j
            WHERE j.id = ANY (v_old_heads)
              AND (j.status <> 'queued' OR j.attempted_at IS NOT NULL)
            ORDER BY j.key
            LIMIT 1;
            IF FOUND THEN
                RAISE EXCEPTION 'ordered: late event: key % seq % is below a job of that key that has already started',
                    v_late.key, v_late.seq
                    USING ERRCODE = 'ORD01',
                          DETAIL = json_build_object('key', v_late.key, 'seq', v_late.seq,
                                                     'later_seq', v_late.later_seq)::text;
            END IF;
        END IF;

        -- One wake-up per batch, delivered at commit, and only if the batch made a job
        -- claimable now: a job queued behind an open one is started by whoever finishes that
        -- one, and a NOTIFY serialises commits (a global lock at commit), so appends to busy
        -- keys skip it. The payload lets listeners of other schemas in the same database
        -- ignore it.
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
    END IF;

    -- A batch holds each (key, seq) once (the client sends repeats once).
    RETURN QUERY
    SELECT b.ord, coalesce(b.existing_id, n.id), b.existing_id IS NOT NULL
    FROM unnest(v_events) AS b
    LEFT JOIN unnest(v_new_keys, v_new_seqs, v_new_ids) AS n(key, seq, id)
        ON b.existing_id IS NULL AND n.key = b.key AND n.seq = b.seq
    ORDER BY b.ord;
END
$$;
