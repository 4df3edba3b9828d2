-- Enqueues one event in the default mode, validated by the client (see ordered_enqueue_one in
-- the schema). id is 0 for an event at or below its key's archived history.
-- $1 key            text         the event's key
-- $2 seq            bigint       its seq
-- $3 kind           text         its kind
-- $4 payload        text         its JSON payload
-- $5 run_at         timestamptz  its run_at (null: now)
-- $6 max_attempts   integer      its attempt limit, the default applied
-- $7 max_key_bytes  integer      the limit of keys and kinds, for ordered_enqueue_events
SELECT coalesce(id, 0), duplicate
FROM ordered_enqueue_one($1::text, $2::bigint, $3::text, $4::text::jsonb, $5::timestamptz, $6::integer, $7::integer);
