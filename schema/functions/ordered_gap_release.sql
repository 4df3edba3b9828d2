-- ordered_gap_release passes the lowest missing range of a contiguous key now: the first seqs
-- at or above its next seq, from there up to the next open job, that were never enqueued. It
-- records the range in ordered_gaps_passed with p_reason ('released': an operator; 'timeout':
-- the key's gap policy), moves the key's next_seq past it and refreshes its head, and returns
-- the range; no row when the key misses no seq below an open job. The key's running job, if
-- any, is not touched: its claim stays current and fenced, and once it finishes the key moves
-- on past the range. A seq of the range enqueued afterwards is late. ORD09: no contiguous key
-- of that name.
CREATE OR REPLACE FUNCTION ordered_gap_release(p_key text, p_reason text DEFAULT 'released')
RETURNS TABLE (from_seq bigint, to_seq bigint)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_expect bigint;
    v_seq bigint;
    v_from bigint;
    v_to bigint;
BEGIN
    -- The same lock as FOR NO KEY UPDATE, and a new row version, as admin operations take it
    -- (ordered_job_lock_key).
    UPDATE ordered_keys AS k SET seq_max = k.seq_max WHERE k.key = p_key AND k.next_seq IS NOT NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'ordered: key % is not a contiguous key', p_key
            USING ERRCODE = 'ORD09', DETAIL = json_build_object('key', p_key)::text;
    END IF;
    v_expect := ordered_key_next_seq(p_key);
    -- The open jobs from the next seq on, in seq order, up to the first hole.
    FOR v_seq IN
        SELECT o.seq FROM ordered_jobs AS o
        WHERE o.key = p_key AND o.status IN ('queued', 'blocked') AND o.seq >= v_expect
        ORDER BY o.seq
    LOOP
        IF v_seq > v_expect THEN
            v_from := v_expect;
            v_to := v_seq - 1;
            EXIT;
        END IF;
        v_expect := v_seq + 1;
    END LOOP;
    IF v_from IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO ordered_gaps_passed (key, from_seq, to_seq, passed_at, reason)
    VALUES (p_key, v_from, v_to, clock_timestamp(), p_reason);
    UPDATE ordered_keys AS k SET next_seq = greatest(k.next_seq, v_to + 1) WHERE k.key = p_key;
    PERFORM ordered_heads_refresh(ARRAY[p_key]);
    PERFORM pg_notify('ordered_jobs', current_schema());
    RETURN QUERY SELECT v_from, v_to;
END
$$;
COMMENT ON FUNCTION ordered_gap_release(text, text) IS
'Internal to ordered: passes the lowest missing range of a contiguous key (ordered gaps release, Client.ReleaseGap, gap timeouts). Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
