-- ordered_enqueue is the JSON form of ordered_enqueue_events, for callers that cannot send a
-- composite array (database/sql, bun, psql): a JSON array of objects with key, seq, kind,
-- payload, run_at (null: now) and max_attempts. It returns what ordered_enqueue_events returns.
CREATE OR REPLACE FUNCTION ordered_enqueue(p_events jsonb)
RETURNS TABLE (ord integer, id bigint, duplicate boolean)
LANGUAGE sql
SET plan_cache_mode = force_generic_plan
AS $$
    SELECT e.ord, e.id, e.duplicate
    FROM ordered_enqueue_events(ARRAY(
        SELECT ROW(e.ord, e.v->>'key', (e.v->>'seq')::bigint, coalesce(e.v->>'kind', ''),
                   coalesce(e.v->'payload', 'null'::jsonb), (e.v->>'run_at')::timestamptz,
                   (e.v->>'max_attempts')::integer, NULL)::ordered_event
        FROM jsonb_array_elements(p_events) WITH ORDINALITY AS e(v, ord)
        ORDER BY e.ord)) AS e
$$;
