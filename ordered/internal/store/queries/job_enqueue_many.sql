-- Enqueues a batch given as one array per column, in the order of the events (see
-- ordered_enqueue_events in the schema). Sent in the binary protocol, nothing is parsed but
-- each payload. The payloads travel as text[] and are cast one by one, which is cheaper than
-- building a jsonb[] parameter. id is 0 for an event at or below its key's archived history.
-- The payload limit is not passed: the client checks it on the bytes it sends, which the
-- database, seeing only the parsed jsonb, cannot measure.
-- $1 keys           text[]         the events' keys
-- $2 seqs           bigint[]       their seqs, same positions
-- $3 kinds          text[]         their kinds
-- $4 payloads       text[]         their JSON payloads
-- $5 run_ats        timestamptz[]  their run_at (null: now)
-- $6 max_attempts   integer[]      their attempt limits
-- $7 max_key_bytes  integer        the limit of keys and kinds
-- $8 attempts       integer        the attempt limit of an event that sets none
-- $9 first_seq      bigint         the first seq of contiguous keys (null: the default mode)
-- $10 gap_action    text           their gap policy: wait, proceed or block
-- $11 gap_timeout   interval       after which proceed or block applies (null for wait)
SELECT ord, coalesce(id, 0), duplicate FROM ordered_enqueue_events(ARRAY(
    SELECT ROW(e.key, e.seq, e.kind, e.payload::jsonb, e.run_at, e.max_attempts)::ordered_event
    FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::timestamptz[], $6::integer[])
         WITH ORDINALITY AS e(key, seq, kind, payload, run_at, max_attempts, ord)
    ORDER BY e.ord), $7::integer, NULL, $8::integer, $9::bigint, $10::text, $11::interval);
