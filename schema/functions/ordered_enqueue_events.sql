-- ordered_enqueue_events enqueues a batch of events in the caller's transaction, all or nothing,
-- and returns one row per event in the order given: its position (ord, from 1), its job's id,
-- and whether the event was a duplicate (nothing written). It is the interface for producers
-- in any language; docs/sql.md documents it. It runs in the queue's schema whatever the
-- caller's search_path (the one it was created with: the queue's schema alone), so a call
-- qualified with a schema enqueues to that schema's queue. p_max_key_bytes (keys and kinds),
-- p_max_payload_bytes (payload::text; null: no limit) and p_max_attempts (the default of an
-- event that sets none, or 0) have the Go client's defaults; the Go client passes its Config.
--
-- Events are first validated by the Go client's rules (ordered_event_problem, one pass over
-- the array): the first invalid one raises ORD07. A repeat of an earlier event of the call
-- with other content raises ORD05; with the same content it is a duplicate of that event. A duplicate of a stored job is compared with it: the same content
-- (payload by jsonb equality, kind, run_at, max_attempts) is an idempotent no-op; a different
-- one raises ORD05 and the batch writes nothing. The comparison costs nothing for a new event:
-- it reads the columns of the row that the lookup of a duplicate fetches anyway. An event at or
-- below its key's archived history whose job is no longer stored is a no-op too, reported with
-- a null id: a producer that re-sends an event it sent long ago gets the answer it gets for one
-- still stored, and the event never runs again (the key keeps only its highest archived seq,
-- so such an event can be neither compared nor told from one never sent that is as low). A
-- late event (seq below a job of its key that has started or finished) raises ORD01 and
-- nothing is written.
--
-- It checks its events for lateness twice: before the insert, and again as it moves heads, for
-- the heads its events go below. Claims do not wait for the key row an enqueue holds, so a
-- queued head can be claimed and given back for a retry between the first check and the move;
-- it has started by then, and the move refuses to demote it (ordered_heads_refresh). Jobs are
-- written through this function (or the Go client's paths, which keep the same rules) only:
-- the heads are kept beside them.
--
-- p_first_seq makes the call's keys contiguous (gap-aware; null: the default mode): a key
-- created by the call starts its sequence at p_first_seq, with the gap policy p_gap_action
-- ('wait', or 'proceed' or 'block' after p_gap_timeout). A key keeps the mode, first seq and
-- gap policy it was created with; a call of the other mode raises ORD08 and writes nothing.
-- An event of a contiguous key below its next seq that is not stored is late (ORD01).
CREATE OR REPLACE FUNCTION ordered_enqueue_events(p_events ordered_event[],
                                                  p_max_key_bytes integer DEFAULT 255,
                                                  p_max_payload_bytes integer DEFAULT 1048576,
                                                  p_max_attempts integer DEFAULT 25,
                                                  p_first_seq bigint DEFAULT NULL,
                                                  p_gap_action text DEFAULT 'wait',
                                                  p_gap_timeout interval DEFAULT NULL)
RETURNS TABLE (ord integer, id bigint, duplicate boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
SET enable_bitmapscan = off
SET search_path FROM CURRENT
AS $$
DECLARE
    v_events ordered_enqueue_item[];
    v_null_ord integer;
    v_bad_ord integer;
    v_repeats boolean;
    v_first_of integer[];
    v_repeat json;
    v_late record;
    v_conflict record;
    v_conflict_ord integer;
    v_archived_keys text[];
    v_archived_seqs bigint[];
    v_keys text[];
    v_new_keys text[];
    v_new_seqs bigint[];
    v_new_ids bigint[];
    v_event ordered_event;
    v_id bigint;
    v_available_at timestamptz;
    v_max_attempts integer;
    v_next_seq bigint;
    v_mismatch text;
BEGIN
    IF coalesce(cardinality(p_events), 0) = 0 THEN
        RETURN; -- an empty call (or a null array) enqueues nothing
    ELSIF p_max_key_bytes IS NULL OR p_max_key_bytes NOT BETWEEN 1 AND 2048 THEN
        -- 2048: the Go client's MaxKeyBytesMax, what a btree index entry holds with a seq.
        RAISE EXCEPTION 'ordered: p_max_key_bytes must be between 1 and 2048, not %', coalesce(p_max_key_bytes::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
    ELSIF p_max_payload_bytes < 1 THEN
        RAISE EXCEPTION 'ordered: p_max_payload_bytes must be at least 1 (or null: no limit), not %', p_max_payload_bytes
            USING ERRCODE = 'invalid_parameter_value';
    ELSIF p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        RAISE EXCEPTION 'ordered: p_max_attempts must be at least 1, not %', coalesce(p_max_attempts::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
    ELSIF p_first_seq < 0 THEN
        RAISE EXCEPTION 'ordered: p_first_seq must be 0 or more (or null: the default mode), not %', p_first_seq
            USING ERRCODE = 'invalid_parameter_value';
    ELSIF p_first_seq IS NULL AND (p_gap_action IS DISTINCT FROM 'wait' OR p_gap_timeout IS NOT NULL) THEN
        -- A gap policy given for the default mode would be dropped without a word.
        RAISE EXCEPTION 'ordered: p_gap_action and p_gap_timeout apply to contiguous keys only: set p_first_seq, or leave them out for the default mode (p_gap_action %, p_gap_timeout %)',
            coalesce(p_gap_action, 'null'), coalesce(p_gap_timeout::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
    ELSIF p_first_seq IS NOT NULL AND (p_gap_action IS NULL OR p_gap_action NOT IN ('wait', 'proceed', 'block')) THEN
        RAISE EXCEPTION 'ordered: p_gap_action must be wait, proceed or block, not %', coalesce(p_gap_action, 'null')
            USING ERRCODE = 'invalid_parameter_value';
    ELSIF p_first_seq IS NOT NULL AND p_gap_action = 'wait' AND p_gap_timeout IS NOT NULL THEN
        RAISE EXCEPTION 'ordered: p_gap_timeout must be null for p_gap_action wait, not %', p_gap_timeout
            USING ERRCODE = 'invalid_parameter_value';
    ELSIF p_first_seq IS NOT NULL AND p_gap_action <> 'wait' AND NOT coalesce(p_gap_timeout > interval '0', false) THEN
        RAISE EXCEPTION 'ordered: p_gap_timeout must be positive for p_gap_action %, not %', p_gap_action, coalesce(p_gap_timeout::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
    ELSIF array_ndims(p_events) > 1 THEN
        RAISE EXCEPTION 'ordered: p_events must be a one-dimensional array, not one of % dimensions', array_ndims(p_events)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- Validate, then lock the keys, in one statement (one pass over the events). The first
    -- invalid event, by its position in p_events (ord), raises ORD07 below, and then the
    -- statement has written nothing. A NULL element unnests as a row of nulls; array_position
    -- tells it apart (and costs nothing for an array without nulls).
    --
    -- The keys are locked in a fixed order (no deadlocks between batches). The statement must
    -- always write the key row, never only lock it: that is what makes a REPEATABLE READ or
    -- SERIALIZABLE caller with a stale snapshot fail with a serialization error instead of
    -- computing heads from it. It returns the archive's watermark of the keys whose lowest
    -- event here is at or below it; the lock keeps archival from moving it until this
    -- transaction ends. Counting the events of each (key, seq) on the way, it also tells
    -- whether the call repeats one.
    v_null_ord := array_position(p_events, NULL) - array_lower(p_events, 1) + 1;

    -- One valid event above everything its key ever had, the common case, needs only the key
    -- row's write and the insert: no job of the key has its seq or a higher one, so it is no
    -- duplicate and not late, and it is the head exactly when the key has none (no open job).
    -- The upsert writes the key row only when the event is above seq_max; otherwise it leaves
    -- the row locked, and the steps below write it and decide.
    IF cardinality(p_events) = 1 AND v_null_ord IS NULL AND p_first_seq IS NULL THEN
        v_event := p_events[array_lower(p_events, 1)];
        IF ordered_event_problem(false, v_event.key, v_event.seq, v_event.kind, v_event.payload, v_event.run_at,
                                 v_event.max_attempts, p_max_key_bytes, p_max_payload_bytes) IS NULL THEN
            INSERT INTO ordered_keys AS k (key, seq_max) VALUES (v_event.key, v_event.seq)
            ON CONFLICT (key) DO UPDATE SET seq_max = excluded.seq_max WHERE k.seq_max < excluded.seq_max
            RETURNING k.next_seq INTO v_next_seq;
            IF FOUND AND v_next_seq IS NOT NULL THEN
                RAISE EXCEPTION 'ordered: sequence mode mismatch: key % is contiguous, and the event was enqueued in the default mode', v_event.key
                    USING ERRCODE = 'ORD08',
                          DETAIL = json_build_object('key', v_event.key, 'contiguous', true)::text;
            ELSIF FOUND THEN
                INSERT INTO ordered_jobs AS j (key, seq, kind, payload, available_at, max_attempts, run_at)
                VALUES (v_event.key, v_event.seq, coalesce(v_event.kind, ''), coalesce(v_event.payload, 'null'::jsonb),
                        coalesce(v_event.run_at, now()),
                        CASE WHEN coalesce(v_event.max_attempts, 0) = 0 THEN p_max_attempts ELSE v_event.max_attempts END,
                        v_event.run_at)
                RETURNING j.id, j.available_at, j.max_attempts INTO v_id, v_available_at, v_max_attempts;
                -- The head of a key that had none (no open job); a caller that keeps one
                -- snapshot locks the head it sees there.
                PERFORM ordered_head_insert(v_event.key, v_id, v_event.seq, v_available_at, v_max_attempts);
                RETURN QUERY SELECT 1, v_id, false;
                RETURN;
            END IF;
        END IF;
    END IF;
    WITH e AS MATERIALIZED (
        SELECT e.key, e.seq, e.ord,
               ordered_event_problem(e.ord = v_null_ord, e.key, e.seq, e.kind, e.payload, e.run_at,
                                     e.max_attempts, p_max_key_bytes, p_max_payload_bytes) IS NOT NULL AS bad
        FROM unnest(p_events) WITH ORDINALITY AS e(key, seq, kind, payload, run_at, max_attempts, ord)
    ), v AS (
        SELECT min(e.ord) FILTER (WHERE e.bad) AS bad_ord FROM e
    ), s AS (
        SELECT e.key, e.seq, count(*) AS n FROM e GROUP BY e.key, e.seq
    ), b AS (
        SELECT s.key, min(s.seq) AS seq_min, max(s.seq) AS seq_max, max(s.n) AS n_max FROM s GROUP BY s.key
    ), locked AS (
        INSERT INTO ordered_keys AS k (key, seq_max, next_seq, gap_action, gap_timeout)
        SELECT b.key, b.seq_max, p_first_seq,
               CASE WHEN p_first_seq IS NOT NULL THEN p_gap_action END,
               CASE WHEN p_first_seq IS NOT NULL THEN p_gap_timeout END
        FROM b WHERE (SELECT v.bad_ord FROM v) IS NULL ORDER BY b.key
        ON CONFLICT (key) DO UPDATE SET seq_max = greatest(k.seq_max, excluded.seq_max)
        RETURNING k.key, k.archived_seq, k.next_seq
    )
    SELECT (SELECT v.bad_ord FROM v),
           array_agg(l.key) FILTER (WHERE b.seq_min <= l.archived_seq),
           array_agg(l.archived_seq) FILTER (WHERE b.seq_min <= l.archived_seq),
           bool_or(b.n_max > 1),
           min(l.key) FILTER (WHERE (l.next_seq IS NULL) <> (p_first_seq IS NULL))
    INTO v_bad_ord, v_archived_keys, v_archived_seqs, v_repeats, v_mismatch
    FROM locked AS l JOIN b ON b.key = l.key;
    IF v_bad_ord IS NOT NULL THEN
        PERFORM ordered_enqueue_invalid(json_strip_nulls(json_build_object(
                    'ord', e.ord, 'key', e.key, 'seq', e.seq, 'field', p.problem[1], 'problem', p.problem[2])))
        FROM unnest(p_events) WITH ORDINALITY AS e(key, seq, kind, payload, run_at, max_attempts, ord)
        CROSS JOIN LATERAL (SELECT ordered_event_problem(e.ord = v_null_ord, e.key, e.seq, e.kind, e.payload, e.run_at,
                                                         e.max_attempts, p_max_key_bytes, p_max_payload_bytes) AS problem) AS p
        WHERE e.ord = v_bad_ord;
    END IF;
    -- A key keeps the mode it was created with: a call of the other mode is refused, so that
    -- no event is ordered otherwise than its producer asked.
    IF v_mismatch IS NOT NULL THEN
        RAISE EXCEPTION 'ordered: sequence mode mismatch: key % is %, and the events were enqueued %', v_mismatch,
            CASE WHEN p_first_seq IS NULL THEN 'contiguous' ELSE 'in the default mode' END,
            CASE WHEN p_first_seq IS NULL THEN 'in the default mode' ELSE 'as contiguous' END
            USING ERRCODE = 'ORD08',
                  DETAIL = json_build_object('key', v_mismatch, 'contiguous', p_first_seq IS NULL)::text;
    END IF;

    -- Repeats of a (key, seq) within the call (rare: the Go client sends each once) are
    -- compared with its first event, as the Go client compares the repeats of a batch: after
    -- defaults, payload by jsonb equality. The first that differs raises ORD05; the others are
    -- marked (v_first_of[ord] is the ord of the event repeated, 0 for a first) and reported as
    -- duplicates of their first event.
    IF v_repeats THEN
        WITH e AS (
            SELECT e.ord, e.key, e.seq, coalesce(e.kind, '') AS kind, coalesce(e.payload, 'null'::jsonb) AS payload,
                   e.run_at, CASE WHEN coalesce(e.max_attempts, 0) = 0 THEN p_max_attempts ELSE e.max_attempts END AS max_attempts,
                   min(e.ord) OVER (PARTITION BY e.key, e.seq) AS first
            FROM unnest(p_events) WITH ORDINALITY AS e(key, seq, kind, payload, run_at, max_attempts, ord)
        )
        SELECT array_agg(CASE WHEN e.first = e.ord THEN 0 ELSE e.first END ORDER BY e.ord),
               (array_agg(json_build_object('ord', e.ord, 'key', e.key, 'seq', e.seq, 'field', d.field, 'stored', false)
                          ORDER BY e.ord) FILTER (WHERE d.field IS NOT NULL))[1]
        INTO v_first_of, v_repeat
        FROM e JOIN e AS f ON f.ord = e.first
        CROSS JOIN LATERAL (SELECT CASE
            WHEN f.ord = e.ord THEN NULL
            WHEN f.payload IS DISTINCT FROM e.payload THEN 'payload'
            WHEN f.kind IS DISTINCT FROM e.kind THEN 'kind'
            WHEN f.run_at IS DISTINCT FROM e.run_at THEN 'run_at'
            WHEN f.max_attempts IS DISTINCT FROM e.max_attempts THEN 'max_attempts'
            END AS field) AS d;
        IF v_repeat IS NOT NULL THEN
            RAISE EXCEPTION 'ordered: duplicate event with different content: key % seq % is earlier in the same call with a different %',
                v_repeat->>'key', v_repeat->>'seq', v_repeat->>'field'
                USING ERRCODE = 'ORD05', DETAIL = v_repeat::text;
        END IF;
    END IF;

    -- A caller that keeps one snapshot must not compute heads from a stale one: lock the heads
    -- its snapshot sees, which raises a serialization error if any changed since.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM 1 FROM ordered_heads AS h
        WHERE h.key IN (SELECT DISTINCT b.key FROM unnest(p_events) AS b)
        FOR SHARE;
    END IF;

    -- Appends, the common case of a batch: no event repeats another or is at or below its
    -- key's archived history, and each key's lowest event is above every job the key has
    -- (one probe of the (key, seq) index a key). Then no event is a duplicate and
    -- none is late, and the per-event lookups below are skipped. The key rows are held, so no
    -- job of these keys can appear meanwhile (a REPEATABLE READ snapshot that missed one has
    -- failed at the key row's write above).
    IF p_first_seq IS NULL AND NOT v_repeats AND v_archived_keys IS NULL AND NOT EXISTS (
            SELECT 1
            FROM (SELECT e.key, min(e.seq) AS seq FROM unnest(p_events) AS e GROUP BY e.key) AS b
            WHERE EXISTS (SELECT 1 FROM ordered_jobs AS o WHERE o.key = b.key AND o.seq >= b.seq)) THEN
        SELECT array_agg(ROW(e.ord, e.key, e.seq, coalesce(e.kind, ''), coalesce(e.payload, 'null'::jsonb),
                             e.run_at, CASE WHEN coalesce(e.max_attempts, 0) = 0 THEN p_max_attempts ELSE e.max_attempts END,
                             NULL)::ordered_enqueue_item ORDER BY e.ord)
        INTO v_events
        FROM unnest(p_events) WITH ORDINALITY AS e(key, seq, kind, payload, run_at, max_attempts, ord);
    ELSE
        -- From here on every statement sees all committed jobs of these keys (READ COMMITTED).
        -- A duplicate is compared
        -- with it; the first event whose content differs is named below. The events are numbered
        -- here, with their defaults: kind '', payload JSON null, max_attempts p_max_attempts for
        -- null or 0.
        SELECT array_agg(ROW(b.ord, b.key, b.seq, b.kind, b.payload, b.run_at, b.max_attempts,
                             coalesce(j.id, -nullif(v_first_of[b.ord], 0)))::ordered_enqueue_item ORDER BY b.ord),
               min(b.ord) FILTER (WHERE j.id IS NOT NULL AND (
                   j.payload IS DISTINCT FROM b.payload OR j.kind IS DISTINCT FROM b.kind
                   OR j.run_at IS DISTINCT FROM b.run_at
                   OR j.max_attempts IS DISTINCT FROM b.max_attempts))
        INTO v_events, v_conflict_ord
        FROM (SELECT e.ord::integer AS ord, e.key, e.seq, coalesce(e.kind, '') AS kind,
                     coalesce(e.payload, 'null'::jsonb) AS payload, e.run_at,
                     CASE WHEN coalesce(e.max_attempts, 0) = 0 THEN p_max_attempts ELSE e.max_attempts END AS max_attempts
              FROM unnest(p_events) WITH ORDINALITY AS e(key, seq, kind, payload, run_at, max_attempts, ord)) AS b
        LEFT JOIN LATERAL (
            SELECT o.id, o.kind, o.payload, o.run_at, o.max_attempts FROM ordered_jobs AS o
            WHERE o.key = b.key AND o.seq = b.seq) AS j ON true;
        IF v_conflict_ord IS NOT NULL THEN
            SELECT b.ord, b.key, b.seq,
                   CASE WHEN j.payload IS DISTINCT FROM b.payload THEN 'payload'
                        WHEN j.kind IS DISTINCT FROM b.kind THEN 'kind'
                        WHEN j.run_at IS DISTINCT FROM b.run_at THEN 'run_at'
                        ELSE 'max_attempts' END AS field
            INTO v_conflict
            FROM unnest(v_events) AS b
            JOIN ordered_jobs AS j ON j.id = b.existing_id
            WHERE b.ord = v_conflict_ord;
            RAISE EXCEPTION 'ordered: duplicate event with different content: key % seq % is already enqueued with a different %',
                v_conflict.key, v_conflict.seq, v_conflict.field
                USING ERRCODE = 'ORD05',
                      DETAIL = json_build_object('ord', v_conflict.ord, 'key', v_conflict.key,
                                                 'seq', v_conflict.seq, 'field', v_conflict.field,
                                                 'stored', true)::text;
        END IF;

        -- An event at or below its key's archived history and not stored was, as far as can be
        -- told, processed and archived: existing_id 0 marks it, a duplicate with no job. (A repeat
        -- of it within the call keeps its mark, and is reported as the event it repeats.) A
        -- contiguous key tells more: a seq of a gap it passed never ran, and stays late below.
        IF v_archived_keys IS NOT NULL THEN
            v_events := ARRAY(
                SELECT ROW(b.ord, b.key, b.seq, b.kind, b.payload, b.run_at, b.max_attempts,
                           CASE WHEN b.existing_id IS NULL AND b.seq <= a.archived_seq
                                     AND (p_first_seq IS NULL OR NOT EXISTS (
                                         SELECT 1 FROM (SELECT g.to_seq FROM ordered_gaps_passed AS g
                                                        WHERE g.key = b.key AND g.from_seq <= b.seq
                                                        ORDER BY g.from_seq DESC LIMIT 1) AS g
                                         WHERE g.to_seq >= b.seq))
                                THEN 0
                                ELSE b.existing_id END)::ordered_enqueue_item
                FROM unnest(v_events) AS b
                LEFT JOIN unnest(v_archived_keys, v_archived_seqs) AS a(key, archived_seq) ON a.key = b.key
                ORDER BY b.ord);
        END IF;

        -- Late: a later job of the key has started or finished. Jobs start in seq order, and
        -- every job below a key's head has finished, so the first job above the event tells:
        -- finished or failed, started before (attempted_at: a replay resets the attempts of a
        -- job that did run, a crashed batch marks what it held), or the head, claimed or
        -- started. Besides, a running batch may have started any job up to its batch_to, and a
        -- forced replay leaves finished jobs above its head (closed_above). Checked for each
        -- key's lowest new event, which is late if any new event of the key is. Every new event
        -- is above its key's archived history (the others are marked above).
        SELECT b.key, b.seq,
               CASE WHEN f.status <> 'queued' OR f.attempted_at IS NOT NULL
                         OR (f.id = h.job_id AND (h.state <> 'queued' OR h.attempted_at IS NOT NULL))
                    THEN f.seq
                    WHEN b.seq < h.closed_above THEN h.closed_above
                    ELSE h.batch_to END AS later_seq
        INTO v_late
        FROM (SELECT DISTINCT ON (e.key) e.key, e.seq, e.ord
              FROM unnest(v_events) AS e
              WHERE e.existing_id IS NULL
              ORDER BY e.key, e.seq) AS b
        LEFT JOIN LATERAL (
            SELECT j.id, j.seq, j.status, j.attempted_at FROM ordered_jobs AS j
            WHERE j.key = b.key AND j.seq > b.seq
            ORDER BY j.seq LIMIT 1
        ) AS f ON true
        LEFT JOIN LATERAL (SELECT h.* FROM ordered_heads AS h WHERE h.key = b.key OFFSET 0) AS h ON true
        WHERE f.status <> 'queued' OR f.attempted_at IS NOT NULL
           OR (f.id = h.job_id AND (h.state <> 'queued' OR h.attempted_at IS NOT NULL))
           OR b.seq < h.closed_above
           OR (h.state = 'running' AND b.seq > h.seq AND b.seq < h.batch_to)
        ORDER BY b.ord
        LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'ordered: late event: key % seq % is below a job of that key that has already started',
                v_late.key, v_late.seq
                USING ERRCODE = 'ORD01',
                      DETAIL = json_build_object('key', v_late.key, 'seq', v_late.seq,
                                                 'later_seq', v_late.later_seq)::text;
        END IF;
        -- Late in a contiguous key: below its next seq (every seq there has finished or was passed
        -- as a gap) and not stored.
        IF p_first_seq IS NOT NULL THEN
            SELECT b.key, b.seq, n.next_seq AS later_seq
            INTO v_late
            FROM (SELECT DISTINCT ON (e.key) e.key, e.seq, e.ord
                  FROM unnest(v_events) AS e
                  WHERE e.existing_id IS NULL
                  ORDER BY e.key, e.seq) AS b
            CROSS JOIN LATERAL (SELECT ordered_key_next_seq(b.key) AS next_seq) AS n
            WHERE b.seq < n.next_seq
            ORDER BY b.ord
            LIMIT 1;
            IF FOUND THEN
                RAISE EXCEPTION 'ordered: late event: key % seq % is below the key''s next seq % (every seq before it has finished, was passed as a gap, or is below the key''s first seq)',
                    v_late.key, v_late.seq, v_late.later_seq
                    USING ERRCODE = 'ORD01',
                          DETAIL = json_build_object('key', v_late.key, 'seq', v_late.seq,
                                                     'later_seq', v_late.later_seq, 'contiguous', true)::text;
            END IF;
        END IF;
    END IF;

    WITH inserted AS (
        INSERT INTO ordered_jobs (key, seq, kind, payload, available_at, max_attempts, run_at)
        SELECT b.key, b.seq, b.kind, b.payload, coalesce(b.run_at, now()), b.max_attempts, b.run_at
        FROM unnest(v_events) AS b
        WHERE b.existing_id IS NULL
        ORDER BY b.key, b.seq
        RETURNING ordered_jobs.key, ordered_jobs.seq, ordered_jobs.id
    )
    SELECT array_agg(i.key), array_agg(i.seq), array_agg(i.id)
    INTO v_new_keys, v_new_seqs, v_new_ids
    FROM inserted AS i;
    IF v_new_ids IS NULL THEN
        RETURN QUERY SELECT b.ord, CASE WHEN b.existing_id > 0 THEN b.existing_id END, true
                     FROM unnest(v_events) AS b ORDER BY b.ord;
        RETURN;
    END IF;
    -- Only a key whose lowest new event comes before its head, or that has none (it was idle,
    -- or waits on a gap), can get a new head. Appending behind the head, the common case,
    -- changes no head and makes nothing claimable: neither the refresh nor the wake-up check
    -- runs for it. A head the new events go below is demoted unless it has started: then they
    -- are late after all (a claim does not wait for the key row, so the head may have been
    -- claimed, even given back after a run, since the check above), and ORD01 rolls the call
    -- back (ordered_heads_refresh).
    SELECT array_agg(b.key)
    INTO v_keys
    FROM (SELECT e.key, min(e.seq) AS seq FROM unnest(v_new_keys, v_new_seqs) AS e(key, seq)
          GROUP BY e.key) AS b
    LEFT JOIN LATERAL (SELECT h.seq FROM ordered_heads AS h WHERE h.key = b.key OFFSET 0) AS h ON true
    WHERE h.seq IS NULL OR h.seq > b.seq;
    IF v_keys IS NOT NULL THEN
        PERFORM ordered_heads_refresh(v_keys, NULL, true);

        -- One wake-up per batch, delivered at commit, and only if the batch made a job
        -- claimable now: a job queued behind an open one is started by whoever finishes that
        -- one, and a NOTIFY serialises commits (a global lock at commit), so appends to busy
        -- keys skip it. The payload lets listeners of other schemas in the same database
        -- ignore it.
        IF EXISTS (
                SELECT 1
                FROM unnest(v_new_keys, v_new_ids) AS n(key, id)
                JOIN ordered_heads AS h ON h.key = n.key AND h.job_id = n.id
                WHERE n.key = ANY (v_keys) AND h.state = 'queued'
                  AND h.available_at <= statement_timestamp()) THEN
            PERFORM pg_notify('ordered_jobs', current_schema());
        END IF;
    END IF;

    -- id is null for an event at or below its key's archived history (existing_id 0); a repeat
    -- of a new event (existing_id negative) reports that event's new job.
    RETURN QUERY
    SELECT b.ord, CASE WHEN b.existing_id > 0 THEN b.existing_id ELSE n.id END, b.existing_id IS NOT NULL
    FROM unnest(v_events) AS b
    LEFT JOIN unnest(v_new_keys, v_new_seqs, v_new_ids) AS n(key, seq, id)
        ON (b.existing_id IS NULL OR b.existing_id < 0) AND n.key = b.key AND n.seq = b.seq
    ORDER BY b.ord;
END
$$;
COMMENT ON FUNCTION ordered_enqueue_events(ordered_event[], integer, integer, integer, bigint, text, interval) IS
'Enqueues events in the caller''s transaction, all or nothing: ordered_enqueue_events(ARRAY[ROW(key, seq, kind, payload, run_at, max_attempts)::ordered_event, ...]) returns (ord, id, duplicate) per event, in order. Only key and seq are required. Errors: ORD07 invalid event, ORD05 duplicate with different content, ORD01 late event; DETAIL is JSON. Optional limits default to the Go client''s: p_max_key_bytes 255, p_max_payload_bytes 1048576, p_max_attempts 25. Contiguous keys (gap-aware): p_first_seq (null: the default mode), p_gap_action wait|proceed|block, p_gap_timeout; ORD08 mode mismatch. See docs/sql.md.';
