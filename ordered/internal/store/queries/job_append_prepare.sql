-- Readies a batch of appends for COPY (see ordered_enqueue_append_prepare in the schema): locks
-- and writes the key rows, and returns whether every event is an append and, if so, the new
-- jobs' ids and the transaction's now(); it writes the heads of the keys that had none.
-- $1 keys          text[]         the batch's keys, each once, in the order their events are written
-- $2 seq_mins      bigint[]       the lowest seq of each key's events
-- $3 seq_maxs      bigint[]       the highest
-- $4 run_ats       timestamptz[]  the run_at of each key's lowest event (null: now)
-- $5 max_attempts  integer[]      the max_attempts of each key's lowest event
-- $6 counts        integer[]      the number of each key's events
-- $7 events        integer        the number of events (of ids to return)
SELECT appends, ids, tx_now
FROM ordered_enqueue_append_prepare($1::text[], $2::bigint[], $3::bigint[], $4::timestamptz[],
                                    $5::integer[], $6::integer[], $7::integer);
