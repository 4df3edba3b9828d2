-- The table of the plain one-row INSERT that single-event enqueues are measured beside: the
-- event's columns, a bigserial key, nothing else.
CREATE TABLE plain_ev (id bigserial PRIMARY KEY, key text, seq bigint, payload jsonb)
