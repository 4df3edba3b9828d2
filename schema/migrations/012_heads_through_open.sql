-- ordered_jobs_heads goes: a key's head is found through ordered_jobs_open instead. Every job
-- that became a head entered it, so the completion's promoting update, which claims the key's
-- next job, wrote four index entries, not three. Without it a completion batch that claims
-- the next jobs costs 10% less a job (BenchmarkCompleteClaimNext300) and a claim and
-- completion 12% less (BenchmarkClaimCompleteMany64); benchstat, n = 6, p <= 0.009; the
-- enqueue benchmarks are unchanged.
--
-- A head is always open (queued, running or blocked: every statement that finishes or fails a
-- job clears its head), and it is its key's lowest open job but for new events below it that
-- an enqueue holding the key row has just inserted. So a head lookup walks the key's open jobs
-- in seq order and stops at the first head (ORDER BY seq LIMIT 1, which also keeps it a probe
-- per key): one entry, or the batch's own events below the head; a key with no head has no
-- open job but the batch's. ordered_heads_refresh looks heads up before it moves any: between
-- its two updates a key has no head, and a lookup then would walk the key's whole backlog.
--
-- Both functions forbid bitmap scans. With the statistics of a queue whose keys are scattered
-- over the table (a few open jobs a key, claims moving rows), the generic plan of a head
-- lookup read every open job of the key in a bitmap scan and sorted them: 380 buffers on a
-- key with 20,000 queued jobs, against 4 for the index walk. (enable_sort = off, as in 007,
-- would forbid that plan too, but these functions also sort arrays, and a statement whose only
-- plan sorts would then be costed so high that it is JIT-compiled: 50-100 ms a statement.)
--
-- The bodies are otherwise those of 003_per_key_plans.sql (ordered_heads_refresh) and
-- 010_enqueue_refresh_changed_heads.sql (ordered_enqueue_events).
--
-- Locks: the drop blocks reads and writes of the queue table (ACCESS EXCLUSIVE) until the
-- migration commits, a moment; it waits behind any open transaction that has touched the
-- table, and claims queue behind it meanwhile.

CREATE OR REPLACE FUNCTION ordered_heads_refresh(p_keys text[]) RETURNS void
LANGUAGE plpgsql
SET enable_bitmapscan = off
AS $$
DECLARE
    v_keys text[];
    v_heads bigint[];
    v_head_seqs bigint[];
    v_lowest bigint[];
    v_lowest_seqs bigint[];
    v_demoted bigint[];
    v_late record;
BEGIN
    -- Each key's head and lowest open job, where they differ. Every lookup is per key
    -- (LATERAL, and LIMIT keeps the planner from turning one into a join over every open job),
    -- through ordered_jobs_open, and the updates reach their rows through the primary key, so
    -- the cost is a few index probes per key whatever the size of the table and whatever the
    -- planner guesses of p_keys. Both are looked up once, before any head moves: between the
    -- two updates a key has no head, and a lookup would walk its whole backlog to find none.
    -- While the caller holds the key rows, only claims change these keys' jobs (they never
    -- move a head), so what this statement sees stays true; the updates below re-check the
    -- one thing a claim changes, the status.
    SELECT array_agg(k.key), array_agg(cur.id), array_agg(cur.seq), array_agg(lowest.id), array_agg(lowest.seq)
    INTO v_keys, v_heads, v_head_seqs, v_lowest, v_lowest_seqs
    FROM unnest(p_keys) AS k(key)
    LEFT JOIN LATERAL (
        SELECT h.id, h.seq FROM ordered_jobs AS h
        WHERE h.key = k.key AND h.head AND h.status IN ('queued', 'running', 'blocked')
        ORDER BY h.seq LIMIT 1) AS cur ON true
    LEFT JOIN LATERAL (
        SELECT o.id, o.seq FROM ordered_jobs AS o
        WHERE o.key = k.key AND o.status IN ('queued', 'running', 'blocked')
        ORDER BY o.seq LIMIT 1) AS lowest ON true
    WHERE cur.id IS DISTINCT FROM lowest.id;
    IF v_keys IS NULL THEN
        RETURN;
    END IF;

    -- A running head keeps its place. The update waits for a claim of a head in flight and
    -- re-checks its status, so a head claimed meanwhile is not demoted; a claim cannot take a
    -- demoted head, whose row stays locked by this update until the transaction commits, and
    -- then carries head = false.
    WITH demoted AS (
        UPDATE ordered_jobs AS j
        SET head = false
        WHERE j.id = ANY (v_heads)
          AND j.head
          AND j.status <> 'running'
        RETURNING j.id
    )
    SELECT array_agg(d.id) INTO v_demoted FROM demoted AS d;

    -- A head that stayed (it runs) above a lower open job: that job is late.
    SELECT u.key, u.lowest_seq AS seq, u.head_seq AS later_seq INTO v_late
    FROM unnest(v_keys, v_heads, v_head_seqs, v_lowest_seqs) AS u(key, head, head_seq, lowest_seq)
    WHERE u.head IS NOT NULL AND NOT (u.head = ANY (coalesce(v_demoted, '{}')))
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
    WHERE j.id = ANY (v_lowest) AND NOT j.head;
END
$$;

CREATE OR REPLACE FUNCTION ordered_enqueue_events(p_events ordered_event[])
RETURNS TABLE (ord integer, id bigint, duplicate boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_bitmapscan = off
AS $$
DECLARE
    v_events ordered_event[] := p_events;
    v_late record;
    v_keys text[];
    v_new_keys text[];
    v_new_seqs bigint[];
    v_new_ids bigint[];
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
        WHERE j.id = ANY (ARRAY(
            SELECT h.id
            FROM (SELECT DISTINCT b.key FROM unnest(v_events) AS b) AS k
            CROSS JOIN LATERAL (
                SELECT h.id FROM ordered_jobs AS h
                WHERE h.key = k.key AND h.head AND h.status IN ('queued', 'running', 'blocked')
                ORDER BY h.seq LIMIT 1) AS h))
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
    -- it is; a REPEATABLE READ caller meets a replay or skip at the key row, 011.)
    SELECT array_agg(b.key) INTO v_keys
    FROM (SELECT e.key, min(e.seq) AS seq FROM unnest(v_new_keys, v_new_seqs) AS e(key, seq)
          GROUP BY e.key) AS b
    LEFT JOIN LATERAL (
        SELECT h.seq FROM ordered_jobs AS h
        WHERE h.key = b.key AND h.head AND h.status IN ('queued', 'running', 'blocked')
        ORDER BY h.seq LIMIT 1) AS h ON true
    WHERE h.seq IS NULL OR h.seq > b.seq;
    IF v_keys IS NOT NULL THEN
        PERFORM ordered_heads_refresh(v_keys);

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
                    WHERE h.key = b.key AND h.head AND h.status IN ('queued', 'running', 'blocked')
                    ORDER BY h.seq LIMIT 1) AS h
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

DROP INDEX ordered_jobs_heads;
