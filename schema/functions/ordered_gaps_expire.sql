-- ordered_gaps_expire applies the gap policy of up to p_limit keys whose gap has stayed open
-- past its timeout, oldest deadline first: a 'proceed' key passes the gap (ordered_gap_release,
-- reason 'timeout'), a 'block' key is marked blocked for an operator (it stays held until
-- ordered_gap_release or the missing event arrives). Keys whose row another transaction holds
-- (an enqueue in flight) are skipped until the next pass; each key is checked again under its
-- lock. It returns how many keys it acted on.
CREATE OR REPLACE FUNCTION ordered_gaps_expire(p_limit integer) RETURNS integer
LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_key record;
    v_n integer := 0;
BEGIN
    -- Key rows first, in key order, as enqueue locks them.
    FOR v_key IN
        SELECT k.key, k.gap_action FROM ordered_keys AS k
        WHERE k.key = ANY (ARRAY(
            SELECT g.key FROM ordered_gaps AS g
            WHERE g.blocked_at IS NULL AND g.deadline <= clock_timestamp()
            ORDER BY g.deadline
            LIMIT p_limit))
        ORDER BY k.key
        FOR NO KEY UPDATE OF k SKIP LOCKED
    LOOP
        CONTINUE WHEN NOT EXISTS (
            SELECT 1 FROM ordered_gaps AS g
            WHERE g.key = v_key.key AND g.blocked_at IS NULL AND g.deadline <= clock_timestamp());
        IF v_key.gap_action = 'proceed' THEN
            PERFORM ordered_gap_release(v_key.key, 'timeout');
        ELSE
            UPDATE ordered_gaps SET blocked_at = clock_timestamp() WHERE key = v_key.key;
        END IF;
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION ordered_gaps_expire(integer) IS
'Internal to ordered: applies the gap policy of keys whose gap timed out (a worker''s maintenance). Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
