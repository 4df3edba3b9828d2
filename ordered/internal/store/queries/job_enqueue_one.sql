-- Enqueues one event in the default mode, validated by the client, in one statement: the path
-- of a single Enqueue, often inside a request's transaction. It returns the job's id (0 for an
-- event at or below its key's archived history) and whether the event was a duplicate.
--
-- An event above everything its key ever had (an append, or a new key) writes the key row's
-- seq_max (the write orders the key's enqueues by their commits: the next one waits for this
-- one, and a completion of the key waits for it too), then the job, then, if the key has no
-- head row (no open job), the head: the head's unique key decides that, by the rows committed
-- and in flight, not by this statement's snapshot, so a key that a completion emptied after
-- the snapshot gets its head all the same. No job of the key has the event's seq or a higher
-- one, so it is no duplicate and not late. Any other event, or one of a contiguous key, goes to
-- ordered_enqueue_events (the last branch runs only when the first wrote nothing), with the
-- key row already locked by the upsert.
-- $1 key            text         the event's key
-- $2 seq            bigint       its seq
-- $3 kind           text         its kind
-- $4 payload        text         its JSON payload
-- $5 run_at         timestamptz  its run_at (null: now)
-- $6 max_attempts   integer      its attempt limit, the default applied
-- $7 max_key_bytes  integer      the limit of keys and kinds, for ordered_enqueue_events
WITH k AS (
    INSERT INTO ordered_keys AS k (key, seq_max) VALUES ($1::text, $2::bigint)
    ON CONFLICT (key) DO UPDATE SET seq_max = excluded.seq_max
    WHERE k.seq_max < excluded.seq_max AND k.next_seq IS NULL
    RETURNING k.key
), seen AS (
    -- A caller that keeps one snapshot (REPEATABLE READ, SERIALIZABLE) locks the head that
    -- snapshot sees, after the key row as every enqueue locks them: a head claimed, moved or
    -- gone since the snapshot fails the transaction with a serialization error, as
    -- ordered_enqueue_events does.
    SELECT count(*) AS n FROM (
        SELECT 1 FROM ordered_heads AS h JOIN k ON h.key = k.key
        WHERE current_setting('transaction_isolation') <> 'read committed'
        FOR SHARE OF h) AS l
), j AS (
    INSERT INTO ordered_jobs (key, seq, kind, payload, available_at, max_attempts, run_at)
    SELECT k.key, $2::bigint, $3::text, $4::text::jsonb, coalesce($5::timestamptz, now()), $6::integer,
           $5::timestamptz
    FROM k, seen
    RETURNING id, key, seq, available_at, max_attempts
), h AS (
    INSERT INTO ordered_heads (key, job_id, seq, state, available_at, claim_version, attempts,
                               max_attempts, closed_to)
    SELECT j.key, j.id, j.seq, 'queued', j.available_at, 0, 0, j.max_attempts,
           coalesce((SELECT c.seq FROM ordered_jobs AS c WHERE c.key = j.key AND c.seq < j.seq
                     ORDER BY c.seq DESC LIMIT 1), -1)
    FROM j
    ON CONFLICT (key) DO NOTHING
    RETURNING available_at <= statement_timestamp() AS ready
)
SELECT j.id, false
FROM j
LEFT JOIN h ON true
-- a new head claimable now wakes idle workers (NOTIFY, delivered at commit)
LEFT JOIN LATERAL (SELECT pg_notify('ordered_jobs', current_schema()) WHERE h.ready) AS wake ON true
UNION ALL
SELECT coalesce(e.id, 0), e.duplicate
FROM ordered_enqueue_events(
         ARRAY[ROW($1::text, $2::bigint, $3::text, $4::text::jsonb, $5::timestamptz, $6::integer)::ordered_event],
         $7::integer, NULL, $6::integer) AS e
WHERE NOT EXISTS (SELECT 1 FROM k);
