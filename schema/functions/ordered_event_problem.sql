-- ordered_event_problem names what is wrong with an event's fields, as {field, problem}, or
-- returns null when nothing is: the Go client's rules (ordered/enqueue.go validateEvent), in
-- its order and with its words, so that an event refused here reads as the client would have
-- refused it. p_null says the event itself is null (a NULL element of the array). Text in
-- PostgreSQL is valid UTF-8 without NUL already; control characters are Unicode's Cc, U+0001 to
-- U+001F and U+007F to U+009F. A null p_max_payload_bytes leaves payloads unmeasured.
--
-- It is one expression, so PostgreSQL inlines it into the query that calls it on every event:
-- no function call per event (a SET clause or plpgsql would prevent that).
CREATE OR REPLACE FUNCTION ordered_event_problem(p_null boolean, p_key text, p_seq bigint, p_kind text,
                                                 p_payload jsonb, p_run_at timestamptz,
                                                 p_max_attempts integer, p_max_key_bytes integer,
                                                 p_max_payload_bytes integer)
RETURNS text[]
LANGUAGE sql
STABLE
AS $$
SELECT CASE
    WHEN p_null THEN ARRAY[NULL, 'the event is null']
    WHEN p_key IS NULL THEN ARRAY['key', 'missing']
    WHEN p_key = '' THEN ARRAY['key', 'empty']
    WHEN octet_length(p_key) > p_max_key_bytes THEN
        ARRAY['key', format('%s bytes, over the limit of %s', octet_length(p_key), p_max_key_bytes)]
    WHEN p_key ~ '[\u0001-\u001f\u007f-\u009f]' THEN
        ARRAY['key', 'contains the control character U+'
              || upper(lpad(to_hex(ascii(substring(p_key FROM '[\u0001-\u001f\u007f-\u009f]'))), 4, '0'))]
    WHEN p_seq IS NULL THEN ARRAY['seq', 'missing']
    WHEN p_seq < 0 THEN ARRAY['seq', 'negative']
    -- The Go client's MaxSeq: the seq after it must fit a bigint.
    WHEN p_seq > 9223372036854775806 THEN ARRAY['seq', 'out of range (0 to 9223372036854775806)']
    WHEN p_kind ~ '[\u0001-\u001f\u007f-\u009f]' THEN
        ARRAY['kind', 'contains the control character U+'
              || upper(lpad(to_hex(ascii(substring(p_kind FROM '[\u0001-\u001f\u007f-\u009f]'))), 4, '0'))]
    WHEN octet_length(p_kind) > p_max_key_bytes THEN
        ARRAY['kind', format('%s bytes, over the limit of %s', octet_length(p_kind), p_max_key_bytes)]
    WHEN NOT isfinite(p_run_at) THEN ARRAY['run_at', p_run_at::text || ', outside the years 1 to 9999']
    WHEN p_run_at < '0001-01-01 00:00:00+00' OR p_run_at >= '10000-01-01 00:00:00+00' THEN
        ARRAY['run_at', format('year %s, outside 1 to 9999', extract(year FROM p_run_at AT TIME ZONE 'UTC'))]
    WHEN p_max_attempts < 0 THEN ARRAY['max_attempts', 'negative']
    WHEN p_max_payload_bytes IS NOT NULL AND octet_length(p_payload::text) > p_max_payload_bytes THEN
        ARRAY['payload', format('%s bytes, over the limit of %s', octet_length(p_payload::text), p_max_payload_bytes)]
    END
$$;
COMMENT ON FUNCTION ordered_event_problem(boolean, text, bigint, text, jsonb, timestamptz, integer, integer, integer) IS
'Internal to ordered: the validation rules of ordered_enqueue_events and ordered_enqueue. Not an interface to call, and it may change in any release; producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
