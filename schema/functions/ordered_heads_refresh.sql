-- ordered_heads_refresh makes head true for the lowest open job of each given key and false for
-- every other job of those keys. Of a contiguous key, the lowest open job is the head only if
-- its seq is at most the key's next seq (ordered_key_next_seq); otherwise the key has no head
-- and waits on a gap, which ordered_gaps_sync records. It never takes the head from a running job: when that would be
-- needed (an earlier job appeared while a later one runs) it raises ORD01, so the caller's
-- transaction rolls back. Callers hold the key rows locked.
--
-- Every lookup is per key and fenced (OFFSET 0 keeps it a parameterised index probe), so one
-- generic plan serves any batch and the cost is a few index probes per key whatever the size of
-- the table; planning each call afresh would cost more than the call.
CREATE OR REPLACE FUNCTION ordered_heads_refresh(p_keys text[]) RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_late record;
    v_cont_keys text[];
    v_cont_next bigint[];
BEGIN
    SELECT array_agg(k.key), array_agg(ordered_key_next_seq(k.key))
    INTO v_cont_keys, v_cont_next
    FROM ordered_keys AS k
    WHERE k.key = ANY (p_keys) AND k.next_seq IS NOT NULL;

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
            SELECT o.id, o.seq FROM ordered_jobs AS o
            WHERE o.key = k.key AND o.status IN ('queued', 'running', 'blocked')
            ORDER BY o.seq LIMIT 1) AS lowest ON true
        LEFT JOIN unnest(v_cont_keys, v_cont_next) AS c(key, next_seq) ON c.key = k.key
        WHERE cur.id IS DISTINCT FROM
              CASE WHEN c.key IS NULL OR lowest.seq <= c.next_seq THEN lowest.id END))
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
            SELECT o.id, o.seq FROM ordered_jobs AS o
            WHERE o.key = k.key AND o.status IN ('queued', 'running', 'blocked')
            ORDER BY o.seq LIMIT 1) AS lowest
        LEFT JOIN unnest(v_cont_keys, v_cont_next) AS c(key, next_seq) ON c.key = k.key
        WHERE c.key IS NULL OR lowest.seq <= c.next_seq))
      AND NOT j.head
      -- Open, checked again on a row that an overlapping settlement closed while this waited
      -- for it; written as not closed, so that only the primary key serves this update.
      AND j.status NOT IN ('done', 'failed');

    IF v_cont_keys IS NOT NULL THEN
        PERFORM ordered_gaps_sync(v_cont_keys);
    END IF;
END
$$;
COMMENT ON FUNCTION ordered_heads_refresh(text[]) IS
'Internal to ordered: recomputes the head job of keys whose rows the caller holds locked. Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
