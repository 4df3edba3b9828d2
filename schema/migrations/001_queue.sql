-- The queue: one row per key (the enqueue lock and the key's high-water marks) and one row per job.
--
-- Ordering model. Of the open jobs of a key (queued, running or blocked), only the one with the
-- lowest seq may run. That job carries head = true; every other job of the key has head = false,
-- so a key's backlog never appears in the claim index (ordered_jobs_ready holds at most one row
-- per key). The claim still re-checks the rule with a NOT EXISTS guard on ordered_jobs_open.
--
-- Heads are maintained by ordered_heads_refresh, always with the key row locked first:
-- enqueuers lock it by updating seq_max, held until they commit; completers and failers lock
-- it FOR SHARE (they never wait for each other: a stalled worker's open transaction cannot hold
-- up the key's next completion), admin operations and archival FOR NO KEY UPDATE. That
-- serialises every change of a key's head with the enqueues of that key, so in READ COMMITTED
-- a head is never computed from a snapshot that misses an in-flight enqueue.
--
-- A REPEATABLE READ or SERIALIZABLE caller keeps one snapshot, so it must fail rather than use
-- a stale one: a completer's FOR SHARE on a key row an enqueue updated after its snapshot
-- raises a serialization error, and an enqueuer in such a transaction locks the heads of its
-- keys as its snapshot sees them (FOR SHARE), which raises one if a head changed since.
-- Claims never touch the key row.

CREATE TABLE ordered_keys (
    key          text        PRIMARY KEY,
    -- highest seq ever enqueued for the key
    seq_max      bigint      NOT NULL,
    -- highest seq whose job was archived; an event at or below it is late
    archived_seq bigint      NOT NULL DEFAULT -1,
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE ordered_jobs (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key           text        NOT NULL CHECK (key <> ''),
    seq           bigint      NOT NULL CHECK (seq >= 0),
    kind          text        NOT NULL DEFAULT '',
    payload       jsonb       NOT NULL,
    -- queued → running → done | queued (retry) | failed | blocked.
    -- blocked is a permanent failure that holds the key (block policy); failed does not.
    status        text        NOT NULL DEFAULT 'queued'
                  CHECK (status IN ('queued', 'running', 'done', 'failed', 'blocked')),
    head          boolean     NOT NULL DEFAULT false,
    available_at  timestamptz NOT NULL DEFAULT now(),
    lease_until   timestamptz,
    -- incremented by every claim; fences completion, renewal, release and failure
    claim_version bigint      NOT NULL DEFAULT 0,
    attempts      integer     NOT NULL DEFAULT 0,
    max_attempts  integer     NOT NULL CHECK (max_attempts > 0),
    last_error    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    attempted_at  timestamptz,
    finished_at   timestamptz,
    -- Identity of an event. Its columns are (seq, key), not (key, seq), on purpose: an index
    -- led by key would let the planner serve the per-key guard from it and walk a key's whole
    -- finished history, where ordered_jobs_open reads only open jobs.
    CONSTRAINT ordered_jobs_seq_key UNIQUE (seq, key)
);

-- The claim reads the front of this index: ready heads, oldest first. At most one row per key.
CREATE INDEX ordered_jobs_ready ON ordered_jobs (available_at, id)
    WHERE head AND status = 'queued';

-- Lease recovery and the expired-lease maintenance read this one.
CREATE INDEX ordered_jobs_leased ON ordered_jobs (lease_until)
    WHERE status = 'running';

-- The per-key guard and head lookups: open jobs only, so finished history is never scanned.
CREATE INDEX ordered_jobs_open ON ordered_jobs (key, seq)
    WHERE status IN ('queued', 'running', 'blocked');

-- The current head of a key, found without walking its backlog.
CREATE INDEX ordered_jobs_heads ON ordered_jobs (key)
    WHERE head;

-- Finished jobs of a key: an event below one of them is late.
CREATE INDEX ordered_jobs_closed ON ordered_jobs (key, seq)
    WHERE status IN ('done', 'failed');

-- Failed jobs for inspection, replay and skip.
CREATE INDEX ordered_jobs_failed ON ordered_jobs (key, seq)
    WHERE status IN ('failed', 'blocked');

-- Finished jobs in finishing order, for archival in bounded batches.
CREATE INDEX ordered_jobs_finished ON ordered_jobs (finished_at)
    WHERE status = 'done';

-- A queue table has a small live set and heavy churn: vacuum on a fixed number of dead tuples,
-- not a fraction of the table, and leave room on each page for HOT updates of lease renewals.
ALTER TABLE ordered_jobs SET (
    fillfactor = 90,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 10000,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 5000
);
ALTER TABLE ordered_keys SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000
);

-- ordered_heads_refresh makes head true for the lowest open job of each given key and false for
-- every other job of those keys. It never takes the head from a running job: when that would be
-- needed (an earlier job appeared while a later one runs) it raises ORD01, so the caller's
-- transaction rolls back. Callers hold the key rows locked.
CREATE FUNCTION ordered_heads_refresh(p_keys text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_late record;
BEGIN
    -- Every lookup is per key (LATERAL), through ordered_jobs_heads and ordered_jobs_open, so the
    -- cost is a few index probes per key whatever the size of the table.
    UPDATE ordered_jobs AS j
    SET head = false
    FROM unnest(p_keys) AS k(key)
    CROSS JOIN LATERAL (
        SELECT h.id FROM ordered_jobs AS h WHERE h.key = k.key AND h.head) AS cur
    LEFT JOIN LATERAL (
        SELECT o.id FROM ordered_jobs AS o
        WHERE o.key = k.key AND o.status IN ('queued', 'running', 'blocked')
        ORDER BY o.seq LIMIT 1) AS lowest ON true
    WHERE j.id = cur.id
      AND cur.id IS DISTINCT FROM lowest.id
      AND j.head
      AND j.status <> 'running';

    -- A fresh snapshot (READ COMMITTED): sees a claim that committed while the update above
    -- waited for its row. The claim's own NOT EXISTS guard is not re-checked against newer
    -- data; what keeps it from taking a demoted head is that the head's row stays locked by
    -- the update above until this transaction commits, and then carries head = false.
    SELECT k.key, h.seq AS later_seq, lowest.seq INTO v_late
    FROM unnest(p_keys) AS k(key)
    CROSS JOIN LATERAL (
        SELECT h.id, h.seq FROM ordered_jobs AS h WHERE h.key = k.key AND h.head) AS h
    CROSS JOIN LATERAL (
        SELECT o.id, o.seq FROM ordered_jobs AS o
        WHERE o.key = k.key AND o.status IN ('queued', 'running', 'blocked')
        ORDER BY o.seq LIMIT 1) AS lowest
    WHERE h.id <> lowest.id
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ordered: late event: key % seq % is below seq % that has already started',
            v_late.key, v_late.seq, v_late.later_seq
            USING ERRCODE = 'ORD01',
                  DETAIL = json_build_object('key', v_late.key, 'seq', v_late.seq,
                                             'later_seq', v_late.later_seq)::text;
    END IF;

    UPDATE ordered_jobs AS j
    SET head = true
    FROM unnest(p_keys) AS k(key)
    CROSS JOIN LATERAL (
        SELECT o.id FROM ordered_jobs AS o
        WHERE o.key = k.key AND o.status IN ('queued', 'running', 'blocked')
        ORDER BY o.seq LIMIT 1) AS lowest
    WHERE j.id = lowest.id AND NOT j.head;
END
$$;

-- One event of an enqueue batch, in the order given; existing_id is set when (key, seq) exists.
CREATE TYPE ordered_event AS (
    ord          integer,
    key          text,
    seq          bigint,
    kind         text,
    payload      jsonb,
    run_at       timestamptz,
    max_attempts integer,
    existing_id  bigint
);

-- ordered_enqueue inserts a batch of events, given as a JSON array of objects with key, seq,
-- kind, payload, run_at (null: now) and max_attempts, already validated by the client. It
-- returns one row per event: its position (1-based), the job id, and whether (key, seq) already
-- existed (an idempotent no-op). A late event (seq below a job of its key that has started or
-- finished, or at or below the key's archived history) raises ORD01 and nothing is written.
CREATE FUNCTION ordered_enqueue(p_events jsonb)
RETURNS TABLE (ord integer, id bigint, duplicate boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_events ordered_event[];
    v_late record;
    v_keys text[];
BEGIN
    v_events := ARRAY(
        SELECT ROW(e.ord, e.v->>'key', (e.v->>'seq')::bigint, coalesce(e.v->>'kind', ''),
                   coalesce(e.v->'payload', 'null'::jsonb), (e.v->>'run_at')::timestamptz,
                   (e.v->>'max_attempts')::integer, NULL)::ordered_event
        FROM jsonb_array_elements(p_events) WITH ORDINALITY AS e(v, ord)
        ORDER BY e.ord);

    -- Lock the keys in a fixed order (no deadlocks between batches). It must always write the
    -- row, never only lock it: that is what makes a REPEATABLE READ or SERIALIZABLE caller with
    -- a stale snapshot fail with a serialization error instead of computing heads from it.
    INSERT INTO ordered_keys AS k (key, seq_max)
    SELECT b.key, max(b.seq) FROM unnest(v_events) AS b GROUP BY b.key ORDER BY b.key
    ON CONFLICT (key) DO UPDATE SET seq_max = greatest(k.seq_max, excluded.seq_max);

    -- A caller that keeps one snapshot must not compute heads from a stale one: lock the heads
    -- its snapshot sees, which raises a serialization error if any changed since.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM 1 FROM ordered_jobs AS j
        WHERE j.head AND j.key IN (SELECT DISTINCT b.key FROM unnest(v_events) AS b)
        FOR SHARE OF j;
    END IF;

    -- From here on every statement sees all committed jobs of these keys (READ COMMITTED).
    v_events := ARRAY(
        SELECT ROW(b.ord, b.key, b.seq, b.kind, b.payload, b.run_at, b.max_attempts, j.id)::ordered_event
        FROM unnest(v_events) AS b
        LEFT JOIN LATERAL (
            SELECT j.id FROM ordered_jobs AS j WHERE j.seq = b.seq AND j.key = b.key) AS j ON true
        ORDER BY b.ord);

    -- Late: a later job of the key finished, or the first later open job has started (jobs
    -- start in seq order, so if that one has not, no later open job has). attempted_at, not
    -- attempts, marks a start: a replay resets the attempts of a job that did run.
    SELECT b.key, b.seq, coalesce(closed.seq, open.seq) AS later_seq INTO v_late
    FROM unnest(v_events) AS b
    JOIN ordered_keys AS k ON k.key = b.key
    LEFT JOIN LATERAL (
        SELECT j.seq FROM ordered_jobs AS j
        WHERE j.key = b.key AND j.seq > b.seq AND j.status IN ('done', 'failed')
        ORDER BY j.seq LIMIT 1
    ) AS closed ON true
    LEFT JOIN LATERAL (
        SELECT j.seq, j.status, j.attempted_at FROM ordered_jobs AS j
        WHERE j.key = b.key AND j.seq > b.seq AND j.status IN ('queued', 'running', 'blocked')
        ORDER BY j.seq LIMIT 1
    ) AS open ON true
    WHERE b.existing_id IS NULL
      AND (b.seq <= k.archived_seq OR closed.seq IS NOT NULL
           OR open.status <> 'queued' OR open.attempted_at IS NOT NULL)
    ORDER BY b.ord
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ordered: late event: key % seq % is below a job of that key that has already started',
            v_late.key, v_late.seq
            USING ERRCODE = 'ORD01',
                  DETAIL = json_build_object('key', v_late.key, 'seq', v_late.seq,
                                             'later_seq', v_late.later_seq)::text;
    END IF;

    INSERT INTO ordered_jobs (key, seq, kind, payload, available_at, max_attempts)
    SELECT b.key, b.seq, b.kind, b.payload, coalesce(b.run_at, now()), b.max_attempts
    FROM unnest(v_events) AS b
    WHERE b.existing_id IS NULL
    ORDER BY b.key, b.seq;

    SELECT array_agg(DISTINCT b.key) INTO v_keys
    FROM unnest(v_events) AS b WHERE b.existing_id IS NULL;
    IF v_keys IS NOT NULL THEN
        PERFORM ordered_heads_refresh(v_keys);
    END IF;

    -- One wake-up per batch, delivered at commit, and only if the batch made a job claimable
    -- now: a job queued behind an open one is started by whoever finishes that one, and a
    -- NOTIFY serialises commits (a global lock at commit), so appends to busy keys skip it.
    -- The payload lets listeners of other schemas in the same database ignore it.
    IF v_keys IS NOT NULL AND EXISTS (
            SELECT 1 FROM unnest(v_events) AS b
            JOIN ordered_jobs AS j ON j.seq = b.seq AND j.key = b.key
            WHERE b.existing_id IS NULL AND j.head AND j.status = 'queued'
              AND j.available_at <= statement_timestamp()) THEN
        PERFORM pg_notify('ordered_jobs', current_schema());
    END IF;

    RETURN QUERY
    SELECT b.ord, coalesce(b.existing_id, j.id), b.existing_id IS NOT NULL
    FROM unnest(v_events) AS b
    LEFT JOIN LATERAL (
        SELECT j.id FROM ordered_jobs AS j
        WHERE b.existing_id IS NULL AND j.seq = b.seq AND j.key = b.key) AS j ON true
    ORDER BY b.ord;
END
$$;

-- ordered_job_lock_key locks the key row of a job before the job row is touched (key, then job:
-- the same order as enqueue, so the two never deadlock) and returns the job's key and seq.
-- p_exclusive takes the lock that admin operations need; completers and failers share it.
CREATE FUNCTION ordered_job_lock_key(p_id bigint, p_exclusive boolean,
                                     OUT o_key text, OUT o_seq bigint)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT j.key, j.seq INTO o_key, o_seq FROM ordered_jobs AS j WHERE j.id = p_id;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_exclusive THEN
        PERFORM 1 FROM ordered_keys AS k WHERE k.key = o_key FOR NO KEY UPDATE;
    ELSE
        PERFORM 1 FROM ordered_keys AS k WHERE k.key = o_key FOR SHARE;
    END IF;
END
$$;

-- ordered_job_complete marks a job done if (p_id, p_version) is still the current claim and its
-- lease is live, then hands the key to its next open job. It returns false, changing nothing,
-- when the claim was lost.
CREATE FUNCTION ordered_job_complete(p_id bigint, p_version bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_key text;
BEGIN
    SELECT o_key INTO v_key FROM ordered_job_lock_key(p_id, false);
    IF v_key IS NULL THEN
        RETURN false;
    END IF;
    UPDATE ordered_jobs
    SET status = 'done', head = false, lease_until = NULL, finished_at = clock_timestamp()
    WHERE id = p_id AND claim_version = p_version
      AND status = 'running' AND lease_until > clock_timestamp();
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM ordered_heads_refresh(ARRAY[v_key]);
    RETURN true;
END
$$;

-- ordered_job_fail fails a job for good. p_block keeps it at the head of its key (status
-- blocked: later jobs wait); otherwise it becomes failed and the key moves on. With p_expired
-- the claim must have an expired lease and no attempts left (a crashed worker's job); otherwise
-- it must be the current claim with a live lease. Returns false, changing nothing, if not.
CREATE FUNCTION ordered_job_fail(p_id bigint, p_version bigint, p_error text,
                                 p_block boolean, p_expired boolean) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_key text;
BEGIN
    SELECT o_key INTO v_key FROM ordered_job_lock_key(p_id, false);
    IF v_key IS NULL THEN
        RETURN false;
    END IF;
    UPDATE ordered_jobs
    SET status = CASE WHEN p_block THEN 'blocked' ELSE 'failed' END,
        head = p_block, lease_until = NULL, last_error = p_error,
        finished_at = clock_timestamp()
    WHERE id = p_id AND claim_version = p_version AND status = 'running'
      AND CASE WHEN p_expired
               THEN lease_until <= clock_timestamp() AND attempts >= max_attempts
               ELSE lease_until > clock_timestamp() END;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF NOT p_block THEN
        PERFORM ordered_heads_refresh(ARRAY[v_key]);
    END IF;
    RETURN true;
END
$$;

-- ordered_job_replay queues a failed job again with its attempts reset. If a later job of its
-- key has already started, the replay would run out of order: it raises ORD02 unless p_force.
-- It always raises ORD03 while a later job of the key is running. ORD04: no such failed job.
CREATE FUNCTION ordered_job_replay(p_id bigint, p_force boolean) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_key text;
    v_seq bigint;
BEGIN
    SELECT o_key, o_seq INTO v_key, v_seq FROM ordered_job_lock_key(p_id, true);
    IF NOT EXISTS (SELECT 1 FROM ordered_jobs
                   WHERE id = p_id AND status IN ('failed', 'blocked')) THEN
        RAISE EXCEPTION 'ordered: job % is not a failed job', p_id USING ERRCODE = 'ORD04';
    END IF;
    IF EXISTS (SELECT 1 FROM ordered_jobs
               WHERE key = v_key AND seq > v_seq AND status IN ('queued', 'running', 'blocked')
                 AND status = 'running') THEN
        RAISE EXCEPTION 'ordered: job % cannot be replayed while a later job of key % is running',
            p_id, v_key USING ERRCODE = 'ORD03';
    END IF;
    IF NOT p_force AND (
            EXISTS (SELECT 1 FROM ordered_jobs
                    WHERE key = v_key AND seq > v_seq AND status IN ('done', 'failed'))
         OR EXISTS (SELECT 1 FROM ordered_jobs
                    WHERE key = v_key AND seq > v_seq AND status IN ('queued', 'running', 'blocked')
                      AND (status <> 'queued' OR attempted_at IS NOT NULL))) THEN
        RAISE EXCEPTION 'ordered: replaying job % would run it after later jobs of key % (force to replay anyway)',
            p_id, v_key USING ERRCODE = 'ORD02';
    END IF;
    UPDATE ordered_jobs
    SET status = 'queued', head = false, attempts = 0, available_at = now(),
        lease_until = NULL, finished_at = NULL
    WHERE id = p_id;
    PERFORM ordered_heads_refresh(ARRAY[v_key]);
    PERFORM pg_notify('ordered_jobs', current_schema());
END
$$;

-- ordered_job_skip releases a key blocked by a failed job: the job stays, as failed, and the
-- key's next job becomes its head. Skipping a job that already failed without blocking is a
-- no-op. ORD04: no such failed job.
CREATE FUNCTION ordered_job_skip(p_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_key text;
BEGIN
    SELECT o_key INTO v_key FROM ordered_job_lock_key(p_id, true);
    IF NOT EXISTS (SELECT 1 FROM ordered_jobs
                   WHERE id = p_id AND status IN ('failed', 'blocked')) THEN
        RAISE EXCEPTION 'ordered: job % is not a failed job', p_id USING ERRCODE = 'ORD04';
    END IF;
    UPDATE ordered_jobs SET status = 'failed', head = false
    WHERE id = p_id AND status = 'blocked';
    IF FOUND THEN
        PERFORM ordered_heads_refresh(ARRAY[v_key]);
        PERFORM pg_notify('ordered_jobs', current_schema());
    END IF;
END
$$;

-- ordered_archive deletes up to p_limit done jobs finished more than p_older_than ago, oldest
-- first, and records in their keys the highest seq archived, so an event at or below it is
-- still recognised as late. Jobs locked by another archiver are skipped, and key rows are
-- locked in key order, as enqueue locks them, so archivers and enqueuers never deadlock. It
-- returns how many jobs it deleted.
CREATE FUNCTION ordered_archive(p_older_than interval, p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_ids bigint[];
BEGIN
    SELECT array_agg(d.id) INTO v_ids FROM (
        SELECT j.id FROM ordered_jobs AS j
        WHERE j.status = 'done' AND j.finished_at < statement_timestamp() - p_older_than
        ORDER BY j.finished_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED) AS d;
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM 1 FROM ordered_keys AS k
    WHERE k.key IN (SELECT j.key FROM ordered_jobs AS j WHERE j.id = ANY (v_ids))
    ORDER BY k.key
    FOR NO KEY UPDATE;
    WITH deleted AS (
        DELETE FROM ordered_jobs AS j WHERE j.id = ANY (v_ids) RETURNING j.key, j.seq
    )
    UPDATE ordered_keys AS k
    SET archived_seq = greatest(k.archived_seq, d.seq)
    FROM (SELECT key, max(seq) AS seq FROM deleted GROUP BY key) AS d
    WHERE k.key = d.key;
    RETURN cardinality(v_ids);
END
$$;
