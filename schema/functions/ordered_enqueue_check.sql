-- ordered_enqueue_check validates the events of an enqueue call and returns them as the enqueue
-- works on them: numbered by their position in p_events (ord, from 1), kind '' and payload JSON
-- null where they are null, max_attempts p_max_attempts where it is null or 0, and a repeat of
-- an earlier event of the call with the same key and seq marked by existing_id = -(that
-- event's ord). It raises for the first event, by ord, that is invalid (ORD07) or that repeats
-- an earlier one with other content (ORD05), as the Go client checks a batch. p_invalid is a
-- problem its caller found in the event after the last of p_events (ordered_enqueue: a JSON
-- field of the wrong type); it is raised unless an event of p_events comes first. The rules
-- are the Go client's (ordered.Client.Validate); a NULL p_max_payload_bytes leaves payloads
-- unmeasured (the Go client measures the bytes it sends instead).
--
-- It costs one pass over the events, and for a call of several events one hash aggregate to
-- find repeats; only when there are repeats a second pass marks them.
CREATE OR REPLACE FUNCTION ordered_enqueue_check(p_events ordered_event[], p_max_key_bytes integer,
                                                 p_max_payload_bytes integer, p_max_attempts integer,
                                                 p_invalid json DEFAULT NULL)
RETURNS ordered_enqueue_item[]
LANGUAGE plpgsql
AS $$
DECLARE
    v_items ordered_enqueue_item[];
    v_bad json;
    v_conflict json;
    v_null_ord integer;
    v_key text;
BEGIN
    IF p_max_key_bytes IS NULL OR p_max_key_bytes < 1 THEN
        RAISE EXCEPTION 'ordered: p_max_key_bytes must be at least 1, not %', coalesce(p_max_key_bytes::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
    ELSIF p_max_payload_bytes < 1 THEN
        RAISE EXCEPTION 'ordered: p_max_payload_bytes must be at least 1 (or null: no limit), not %', p_max_payload_bytes
            USING ERRCODE = 'invalid_parameter_value';
    ELSIF p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        RAISE EXCEPTION 'ordered: p_max_attempts must be at least 1, not %', coalesce(p_max_attempts::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
    ELSIF array_ndims(p_events) > 1 THEN
        RAISE EXCEPTION 'ordered: p_events must be a one-dimensional array, not one of % dimensions', array_ndims(p_events)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A NULL element unnests as a row of nulls; array_position tells it apart (and costs
    -- nothing for an array without nulls).
    v_null_ord := array_position(p_events, NULL) - array_lower(p_events, 1) + 1;

    -- The rules in the order the Go client applies them (ordered/enqueue.go validateEvent).
    -- Text in PostgreSQL is valid UTF-8 without NUL already. Control characters are Unicode's
    -- Cc: U+0001 to U+001F and U+007F to U+009F.
    SELECT array_agg(ROW(e.ord, e.key, e.seq, coalesce(e.kind, ''), coalesce(e.payload, 'null'::jsonb), e.run_at,
                         CASE WHEN coalesce(e.max_attempts, 0) = 0 THEN p_max_attempts ELSE e.max_attempts END,
                         NULL)::ordered_enqueue_item ORDER BY e.ord),
           (array_agg(json_strip_nulls(json_build_object('ord', e.ord, 'key', e.key, 'seq', e.seq,
                                                         'field', p.problem[1], 'problem', p.problem[2]))
                      ORDER BY e.ord) FILTER (WHERE p.problem IS NOT NULL))[1]
    INTO v_items, v_bad
    FROM unnest(p_events) WITH ORDINALITY AS e(key, seq, kind, payload, run_at, max_attempts, ord)
    CROSS JOIN LATERAL (SELECT CASE
        WHEN e.ord = v_null_ord THEN ARRAY[NULL, 'the event is null']
        WHEN e.key IS NULL THEN ARRAY['key', 'missing']
        WHEN e.key = '' THEN ARRAY['key', 'empty']
        WHEN octet_length(e.key) > p_max_key_bytes THEN
            ARRAY['key', format('%s bytes, over the limit of %s', octet_length(e.key), p_max_key_bytes)]
        WHEN e.key ~ '[\u0001-\u001f\u007f-\u009f]' THEN
            ARRAY['key', 'contains the control character U+'
                  || upper(lpad(to_hex(ascii(substring(e.key FROM '[\u0001-\u001f\u007f-\u009f]'))), 4, '0'))]
        WHEN e.seq IS NULL THEN ARRAY['seq', 'missing']
        WHEN e.seq < 0 THEN ARRAY['seq', 'negative']
        WHEN e.kind ~ '[\u0001-\u001f\u007f-\u009f]' THEN
            ARRAY['kind', 'contains the control character U+'
                  || upper(lpad(to_hex(ascii(substring(e.kind FROM '[\u0001-\u001f\u007f-\u009f]'))), 4, '0'))]
        WHEN octet_length(e.kind) > p_max_key_bytes THEN
            ARRAY['kind', format('%s bytes, over the limit of %s', octet_length(e.kind), p_max_key_bytes)]
        WHEN NOT isfinite(e.run_at) THEN ARRAY['run_at', e.run_at::text || ', outside the years 1 to 9999']
        WHEN e.run_at < '0001-01-01 00:00:00+00' OR e.run_at >= '10000-01-01 00:00:00+00' THEN
            ARRAY['run_at', format('year %s, outside 1 to 9999', extract(year FROM e.run_at AT TIME ZONE 'UTC'))]
        WHEN e.max_attempts < 0 THEN ARRAY['max_attempts', 'negative']
        WHEN p_max_payload_bytes IS NOT NULL AND octet_length(e.payload::text) > p_max_payload_bytes THEN
            ARRAY['payload', format('%s bytes, over the limit of %s', octet_length(e.payload::text), p_max_payload_bytes)]
        END AS problem) AS p;

    -- Repeats of a (key, seq) within the call, compared with its first event as the Go client
    -- compares the repeats of a batch (after defaults; payload by jsonb equality).
    IF cardinality(p_events) > 1 AND EXISTS (
            SELECT FROM unnest(v_items) AS e GROUP BY e.key, e.seq HAVING count(*) > 1) THEN
        WITH first AS (
            SELECT DISTINCT ON (e.key, e.seq) e.*
            FROM unnest(v_items) AS e
            ORDER BY e.key, e.seq, e.ord
        )
        SELECT array_agg(ROW(e.ord, e.key, e.seq, e.kind, e.payload, e.run_at, e.max_attempts,
                             CASE WHEN f.ord < e.ord THEN -f.ord END)::ordered_enqueue_item ORDER BY e.ord),
               (array_agg(json_build_object('ord', e.ord, 'key', e.key, 'seq', e.seq, 'field', d.field,
                                            'stored', false) ORDER BY e.ord) FILTER (WHERE d.field IS NOT NULL))[1]
        INTO v_items, v_conflict
        FROM unnest(v_items) AS e
        LEFT JOIN first AS f ON f.key = e.key AND f.seq = e.seq
        CROSS JOIN LATERAL (SELECT CASE
            WHEN f.ord IS NULL OR f.ord = e.ord THEN NULL
            WHEN f.payload IS DISTINCT FROM e.payload THEN 'payload'
            WHEN f.kind IS DISTINCT FROM e.kind THEN 'kind'
            WHEN f.run_at IS DISTINCT FROM e.run_at THEN 'run_at'
            WHEN f.max_attempts IS DISTINCT FROM e.max_attempts THEN 'max_attempts'
            END AS field) AS d;
    END IF;

    IF v_conflict IS NOT NULL AND (v_bad IS NULL OR (v_conflict->>'ord')::integer < (v_bad->>'ord')::integer) THEN
        RAISE EXCEPTION 'ordered: duplicate event with different content: key % seq % is earlier in the same call with a different %',
            v_conflict->>'key', v_conflict->>'seq', v_conflict->>'field'
            USING ERRCODE = 'ORD05', DETAIL = v_conflict::text;
    END IF;
    v_bad := coalesce(v_bad, p_invalid);
    IF v_bad IS NOT NULL THEN
        -- The key as a JSON string (escapes show control characters), cut to 64 characters.
        v_key := to_json(left(v_bad->>'key', 64))::text
                 || CASE WHEN length(v_bad->>'key') > 64 THEN '…' ELSE '' END;
        RAISE EXCEPTION '%', format('ordered: invalid event %s%s: %s%s', v_bad->>'ord',
                CASE WHEN v_bad->'key' IS NOT NULL AND v_bad->'seq' IS NOT NULL
                         THEN format(' (key %s, seq %s)', v_key, v_bad->>'seq')
                     WHEN v_bad->'key' IS NOT NULL THEN format(' (key %s)', v_key)
                     WHEN v_bad->'seq' IS NOT NULL THEN format(' (seq %s)', v_bad->>'seq')
                     ELSE '' END,
                v_bad->>'field' || ': ', v_bad->>'problem')
            USING ERRCODE = 'ORD07', DETAIL = v_bad::text;
    END IF;
    RETURN v_items;
END
$$;
COMMENT ON FUNCTION ordered_enqueue_check(ordered_event[], integer, integer, integer, json) IS
'Internal to ordered: validates the events of ordered_enqueue_events and ordered_enqueue. Call those instead.';
