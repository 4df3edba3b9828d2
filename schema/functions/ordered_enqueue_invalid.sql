-- ordered_enqueue_invalid raises ORD07 for an invalid event: p_problem is the DETAIL, a JSON
-- object with the event's ord and, where they exist, its key, its seq and the field, and the
-- problem. The message names them as a psql user reads them, the key as a JSON string (its
-- escapes show control characters) cut to 64 characters.
CREATE OR REPLACE FUNCTION ordered_enqueue_invalid(p_problem json) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_key text := to_json(left(p_problem->>'key', 64))::text
                  || CASE WHEN length(p_problem->>'key') > 64 THEN '…' ELSE '' END;
BEGIN
    RAISE EXCEPTION '%', format('ordered: invalid event %s%s: %s%s', p_problem->>'ord',
            CASE WHEN p_problem->'key' IS NOT NULL AND p_problem->'seq' IS NOT NULL
                     THEN format(' (key %s, seq %s)', v_key, p_problem->>'seq')
                 WHEN p_problem->'key' IS NOT NULL THEN format(' (key %s)', v_key)
                 WHEN p_problem->'seq' IS NOT NULL THEN format(' (seq %s)', p_problem->>'seq')
                 ELSE '' END,
            p_problem->>'field' || ': ', p_problem->>'problem')
        USING ERRCODE = 'ORD07', DETAIL = p_problem::text;
END
$$;
COMMENT ON FUNCTION ordered_enqueue_invalid(json) IS
'Internal to ordered: raises the ORD07 error of ordered_enqueue_events and ordered_enqueue. Not an interface to call, and it may change in any release; producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
