-- Enqueues one event in the default mode, validated by the client, if it is an append: an
-- event above every seq its key ever had (seq_max), from a producer appending to a key or
-- starting a new one. It returns the job's id; no row when the event is no append, or the key
-- is contiguous, and then it wrote nothing and the client sends the event through the general
-- path (job_enqueue_many.sql). The statement is kept small: PostgreSQL sets up every node of
-- a plan on each execution, and for a single event that setup is much of the statement's cost.
--
-- It writes the key row's seq_max (the write orders the key's enqueues by their commits: the
-- next one waits for this one, and a completion of the key waits for it too), then the job,
-- then, if the key has no head row (no open job), the head: the head's unique key decides
-- that, by the rows committed and in flight, not by this statement's snapshot, so a key that
-- a completion emptied after the snapshot gets its head all the same. A caller that keeps one
-- snapshot (REPEATABLE READ, SERIALIZABLE) first locks the head that snapshot sees, after the
-- key row (ordered_head_share): a head claimed, moved or gone since fails the transaction with
-- a serialization error, as the general path does. A new head claimable now wakes idle
-- workers (NOTIFY, delivered at commit).
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
    WHERE CASE WHEN current_setting('transaction_isolation') = 'read committed' THEN true
               ELSE ordered_head_share(k.key) END
    RETURNING id, key, seq, available_at, max_attempts
), h AS (
    -- closed_to: the job below, which has finished when the key has no head
    INSERT INTO ordered_heads (key, job_id, seq, state, available_at, claim_version, attempts,
                               max_attempts, closed_to)
    SELECT j.key, j.id, j.seq, 'queued', j.available_at, 0, 0, j.max_attempts,
           coalesce((SELECT c.seq FROM ordered_jobs AS c WHERE c.key = j.key AND c.seq < j.seq
                     ORDER BY c.seq DESC LIMIT 1), -1)
    FROM j
    ON CONFLICT (key) DO NOTHING
    RETURNING CASE WHEN available_at <= statement_timestamp()
                   THEN pg_notify('ordered_jobs', current_schema()) END
)
SELECT j.id FROM j;
