-- Enqueues one event in the default mode, validated by the client, if it is an append: an
-- event above every seq its key ever had (seq_max), from a producer appending to a key or
-- starting a new one. It returns the job's id; no row when the event is no append, or the key
-- is contiguous, and then it wrote nothing and the client sends the event through the general
-- path (job_enqueue_many.sql). The statement is kept small: PostgreSQL sets up every node of
-- a plan on each execution, and for a single event that setup is much of the statement's cost.
--
-- It writes the key row's seq_max (the write orders the key's enqueues by their commits: the
-- next one waits for this one, and a completion of the key waits for it too), then the job.
-- ordered_head_insert then makes the job the key's head if the key has none (no open job),
-- deciding with the key row held: in READ COMMITTED by a snapshot of its own, at another level
-- by locking the head that the caller's snapshot sees (see there). It also wakes idle workers
-- (NOTIFY) for a head claimable now.
-- $1 key            text         the event's key
-- $2 seq            bigint       its seq
-- $3 kind           text         its kind
-- $4 payload        text         its JSON payload
-- $5 run_at         timestamptz  its run_at (null: now)
-- $6 max_attempts   integer      its attempt limit, the default applied
WITH k AS (
    INSERT INTO ordered_keys AS k (key, seq_max) VALUES ($1::text, $2::bigint)
    ON CONFLICT (key) DO UPDATE SET seq_max = excluded.seq_max
    WHERE k.seq_max < excluded.seq_max AND k.next_seq IS NULL
    RETURNING k.key
), j AS (
    INSERT INTO ordered_jobs (key, seq, kind, payload, available_at, max_attempts, run_at)
    SELECT k.key, $2::bigint, $3::text, $4::text::jsonb, coalesce($5::timestamptz, now()), $6::integer,
           $5::timestamptz
    FROM k
    RETURNING id, key, seq, available_at, max_attempts
)
SELECT j.id FROM j WHERE ordered_head_insert(j.key, j.id, j.seq, j.available_at, j.max_attempts);
