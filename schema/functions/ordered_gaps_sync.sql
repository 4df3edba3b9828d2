-- ordered_gaps_sync records which of the given keys wait on a gap, after their heads moved:
-- a contiguous key with open jobs and no head waits (a row in ordered_gaps, its since and
-- deadline kept while it goes on waiting); any other key does not. Callers hold the key rows
-- locked, as for a change of heads. Keys in the default mode cost one probe of ordered_keys
-- each; their rows in ordered_gaps never exist. A contiguous key's open jobs without a head
-- are all above its next seq, so one probe from there finds whether it has any.
CREATE OR REPLACE FUNCTION ordered_gaps_sync(p_keys text[]) RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_waiting text[];
    v_keys text[];
BEGIN
    SELECT array_agg(k.key), array_agg(k.key) FILTER (WHERE h.key IS NULL AND o.found)
    INTO v_keys, v_waiting
    FROM ordered_keys AS k
    LEFT JOIN LATERAL (SELECT h.key FROM ordered_heads AS h WHERE h.key = k.key OFFSET 0) AS h ON true
    CROSS JOIN LATERAL (
        SELECT EXISTS (SELECT 1 FROM ordered_jobs AS o
                       WHERE o.key = k.key AND o.seq >= greatest(k.next_seq, k.archived_seq + 1)
                         AND o.status IN ('queued', 'blocked')) AS found) AS o
    WHERE k.key = ANY (p_keys) AND k.next_seq IS NOT NULL;
    IF v_keys IS NULL THEN
        RETURN;
    END IF;
    DELETE FROM ordered_gaps AS g
    WHERE g.key = ANY (v_keys) AND g.key <> ALL (coalesce(v_waiting, '{}'));
    INSERT INTO ordered_gaps (key, since, deadline)
    SELECT k.key, clock_timestamp(), clock_timestamp() + k.gap_timeout
    FROM ordered_keys AS k
    WHERE k.key = ANY (v_waiting)
    ORDER BY k.key
    ON CONFLICT (key) DO NOTHING;
END
$$;
COMMENT ON FUNCTION ordered_gaps_sync(text[]) IS
'Internal to ordered: records which contiguous keys wait on a gap after their heads moved. Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
