-- Readies a batch of appends for COPY (see ordered_enqueue_append_prepare in the schema): locks
-- and writes the key rows, and returns whether every event is an append and, if so, which keys
-- have an open job, the new jobs' ids and the transaction's now().
-- $1 keys      text[]         the batch's keys, each once
-- $2 seq_mins  bigint[]       the lowest seq of each key's events
-- $3 seq_maxs  bigint[]       the highest
-- $4 run_ats   timestamptz[]  the run_at of each key's lowest event (null: now)
-- $5 events    integer        the number of events (of ids to return)
SELECT appends, open, ids, tx_now
FROM ordered_enqueue_append_prepare($1::text[], $2::bigint[], $3::bigint[], $4::timestamptz[], $5::integer);
