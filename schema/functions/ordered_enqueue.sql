-- ordered_enqueue is the JSON form of ordered_enqueue_events, for callers that cannot send a
-- composite array (psql, database/sql, bun, any driver): a JSON array of event objects with
-- the fields key and seq (required), kind, payload, run_at (RFC 3339; null: now) and
-- max_attempts (null or 0: p_max_attempts), a null field being an absent one. It returns what
-- ordered_enqueue_events returns, and raises what it raises. What only JSON can get wrong is
-- refused here, with ORD07 naming the event and the field: an element that is not an object,
-- a field of another name, a field of the wrong type (a seq that is not a 64-bit integer, a
-- run_at that is not an RFC 3339 time PostgreSQL can store). Those of an event are reported
-- before the problems of its values, and after every problem of an earlier event. It runs in
-- the queue's schema, as ordered_enqueue_events does.
--
-- p_first_seq, p_gap_action and p_gap_timeout make the call's keys contiguous, as they do for
-- ordered_enqueue_events.
--
-- Each value is converted only once its form is checked, so no cast can fail: the first bad
-- event is found in one pass over the array.
CREATE OR REPLACE FUNCTION ordered_enqueue(p_events jsonb,
                                           p_max_key_bytes integer DEFAULT 255,
                                           p_max_payload_bytes integer DEFAULT 1048576,
                                           p_max_attempts integer DEFAULT 25,
                                           p_first_seq bigint DEFAULT NULL,
                                           p_gap_action text DEFAULT 'wait',
                                           p_gap_timeout interval DEFAULT NULL)
RETURNS TABLE (ord integer, id bigint, duplicate boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET search_path FROM CURRENT
AS $$
DECLARE
    v_events ordered_event[];
    v_bad json;
BEGIN
    IF jsonb_typeof(p_events) <> 'array' THEN
        RAISE EXCEPTION 'ordered: invalid events: a JSON array of event objects is expected, not a JSON %', jsonb_typeof(p_events)
            USING ERRCODE = 'ORD07',
                  DETAIL = json_build_object('problem', 'not a JSON array but ' || jsonb_typeof(p_events))::text;
    END IF;

    SELECT array_agg(ROW(c.key, c.seq, c.kind, e.v->'payload', c.run_at, c.max_attempts)::ordered_event ORDER BY e.ord),
           (array_agg(json_strip_nulls(json_build_object('ord', e.ord, 'key', c.key, 'seq', c.seq,
                                                         'field', p.problem[1], 'problem', p.problem[2]))
                      ORDER BY e.ord) FILTER (WHERE p.problem IS NOT NULL))[1]
    INTO v_events, v_bad
    FROM jsonb_array_elements(p_events) WITH ORDINALITY AS e(v, ord)
    -- The type of each field (null when absent or null) and the text of the scalar ones.
    CROSS JOIN LATERAL (SELECT jsonb_typeof(e.v) AS event, jsonb_typeof(e.v->'key') AS key,
                               jsonb_typeof(e.v->'seq') AS seq, jsonb_typeof(e.v->'kind') AS kind,
                               jsonb_typeof(e.v->'run_at') AS run_at,
                               jsonb_typeof(e.v->'max_attempts') AS max_attempts,
                               e.v->>'seq' AS seq_text, e.v->>'run_at' AS run_at_text,
                               e.v->>'max_attempts' AS max_attempts_text) AS t
    -- Whether a number is an integer in range (numbers are compared only once their text is
    -- one of digits: an integer of any length is out of range, not "not an integer"), and
    -- whether a time is RFC 3339, as Go's encoding/json reads one, with an offset PostgreSQL
    -- accepts (up to 15:59) on a day that exists.
    CROSS JOIN LATERAL (SELECT
        CASE WHEN t.seq = 'number' AND t.seq_text ~ '^-?[0-9]+$'
             THEN t.seq_text::numeric BETWEEN -9223372036854775808 AND 9223372036854775807 END AS seq_ok,
        CASE WHEN t.max_attempts = 'number' AND t.max_attempts_text ~ '^-?[0-9]+$'
             THEN t.max_attempts_text::numeric END AS max_attempts_n,
        CASE WHEN t.run_at = 'string'
                  AND t.run_at_text ~ '^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]([.,][0-9]+)?(Z|[+-](0[0-9]|1[0-5]):[0-5][0-9])$'
             THEN substr(t.run_at_text, 9, 2)::integer <= CASE
                      WHEN substr(t.run_at_text, 6, 2) IN ('04', '06', '09', '11') THEN 30
                      WHEN substr(t.run_at_text, 6, 2) <> '02' THEN 31
                      WHEN substr(t.run_at_text, 1, 4)::integer % 4 = 0
                           AND (substr(t.run_at_text, 1, 4)::integer % 100 <> 0
                                OR substr(t.run_at_text, 1, 4)::integer % 400 = 0) THEN 29
                      ELSE 28 END
             END AS run_at_ok) AS f
    -- The values, converted only where their form was checked. Fractions of a second beyond
    -- microseconds are cut, as the Go client cuts them, not rounded.
    CROSS JOIN LATERAL (SELECT
        CASE WHEN t.key = 'string' THEN e.v->>'key' END AS key,
        CASE WHEN f.seq_ok THEN t.seq_text::bigint END AS seq,
        CASE WHEN t.kind = 'string' THEN e.v->>'kind' END AS kind,
        CASE WHEN f.run_at_ok AND substr(t.run_at_text, 1, 4) <> '0000'
             THEN regexp_replace(translate(t.run_at_text, ',', '.'), '(\.[0-9]{6})[0-9]+', '\1')::timestamptz END AS run_at,
        CASE WHEN f.max_attempts_n BETWEEN -2147483648 AND 2147483647 THEN f.max_attempts_n::integer END AS max_attempts
        ) AS c
    CROSS JOIN LATERAL (SELECT CASE
        WHEN t.event <> 'object' THEN ARRAY[NULL, 'not a JSON object but ' || t.event]
        WHEN e.v - '{key,seq,kind,payload,run_at,max_attempts}'::text[] <> '{}'::jsonb THEN
            ARRAY[(SELECT min(k) FROM jsonb_object_keys(e.v - '{key,seq,kind,payload,run_at,max_attempts}'::text[]) AS k),
                  'unknown field (the fields are key, seq, kind, payload, run_at and max_attempts)']
        WHEN t.key <> 'null' AND t.key <> 'string' THEN ARRAY['key', 'not a string']
        WHEN NOT f.seq_ok THEN ARRAY['seq', 'out of range (0 to 9223372036854775806)']
        WHEN t.seq <> 'null' AND f.seq_ok IS NULL THEN ARRAY['seq', 'not an integer']
        WHEN t.kind <> 'null' AND t.kind <> 'string' THEN ARRAY['kind', 'not a string']
        WHEN t.run_at <> 'null' AND NOT coalesce(f.run_at_ok, false) THEN ARRAY['run_at', 'not an RFC 3339 time']
        WHEN f.run_at_ok AND substr(t.run_at_text, 1, 4) = '0000' THEN ARRAY['run_at', 'year 0, outside 1 to 9999']
        WHEN t.max_attempts <> 'null' AND f.max_attempts_n IS NULL THEN ARRAY['max_attempts', 'not an integer']
        WHEN f.max_attempts_n < -2147483648 THEN ARRAY['max_attempts', 'negative']
        WHEN f.max_attempts_n > 2147483647 THEN
            ARRAY['max_attempts', format('%s, over the limit of 2147483647', left(t.max_attempts_text, 32))]
        END AS problem) AS p;

    IF v_bad IS NOT NULL THEN
        -- An earlier event's problem comes first, as ordered_enqueue_events would report it.
        PERFORM ordered_enqueue_invalid(coalesce((
            SELECT json_strip_nulls(json_build_object('ord', e.ord, 'key', e.key, 'seq', e.seq,
                                                      'field', p.problem[1], 'problem', p.problem[2]))
            FROM unnest(v_events) WITH ORDINALITY AS e(key, seq, kind, payload, run_at, max_attempts, ord)
            CROSS JOIN LATERAL (SELECT ordered_event_problem(false, e.key, e.seq, e.kind, e.payload, e.run_at,
                                                             e.max_attempts, p_max_key_bytes, p_max_payload_bytes) AS problem) AS p
            WHERE e.ord < (v_bad->>'ord')::integer AND p.problem IS NOT NULL
            ORDER BY e.ord
            LIMIT 1), v_bad));
    END IF;
    RETURN QUERY SELECT e.ord, e.id, e.duplicate
                 FROM ordered_enqueue_events(v_events, p_max_key_bytes, p_max_payload_bytes, p_max_attempts,
                                             p_first_seq, p_gap_action, p_gap_timeout) AS e;
END
$$;
COMMENT ON FUNCTION ordered_enqueue(jsonb, integer, integer, integer, bigint, text, interval) IS
'Enqueues events given as a JSON array in the caller''s transaction, all or nothing: ordered_enqueue(''[{"key": "cust-42", "seq": 7, "kind": "invoice.paid", "payload": {...}, "run_at": "2026-01-02T15:04:05Z", "max_attempts": 10}]'') returns (ord, id, duplicate) per event, in order. Only key and seq are required; field names are exact. Errors: ORD07 invalid event, ORD05 duplicate with different content, ORD01 late event; DETAIL is JSON. Optional limits default to the Go client''s: p_max_key_bytes 255, p_max_payload_bytes 1048576, p_max_attempts 25. Contiguous keys (gap-aware): p_first_seq (null: the default mode), p_gap_action wait|proceed|block, p_gap_timeout; ORD08 mode mismatch. See docs/sql.md.';
