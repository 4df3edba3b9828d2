-- Aborts the caller's transaction for a batch the client refused before sending it (see
-- ordered_enqueue_refused in the schema).
-- $1 message  text  the client's error
SELECT ordered_enqueue_refused($1::text);
