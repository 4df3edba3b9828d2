-- The queue's tables, indexes and types. The functions that work on them live in
-- schema/functions/, one a file, applied after the migrations whenever their text changes.
--
-- Ordering model. Of the open jobs of a key (queued, running or blocked), only the one with the
-- lowest seq may run. That job carries head = true; every other job of the key has head = false,
-- so a key's backlog never appears in the claim index (ordered_jobs_ready holds at most one row
-- per key). The claim still re-checks the rule with a NOT EXISTS guard on ordered_jobs_open.
--
-- Locking model. Heads are changed only with the key row locked first: enqueuers write it (and
-- hold it until they commit), completers and failers lock it FOR SHARE (they never wait for each
-- other), admin operations and archival lock it FOR NO KEY UPDATE. That serialises every change
-- of a key's head with the enqueues of that key, so in READ COMMITTED a head is never computed
-- from a snapshot that misses an in-flight enqueue; a REPEATABLE READ or SERIALIZABLE caller
-- whose snapshot is stale fails with a serialization error instead. Claims never touch the key
-- row.

-- One row per key: the enqueue lock and the key's high-water marks.
CREATE TABLE ordered_keys (
    key          text        PRIMARY KEY,
    -- highest seq ever enqueued for the key
    seq_max      bigint      NOT NULL,
    -- highest seq whose job was archived; an event at or below it is late
    archived_seq bigint      NOT NULL DEFAULT -1,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- One row per job. Jobs are written through ordered_enqueue_events only, never inserted by
-- hand: it is what keeps (key, seq) unique across open and finished jobs (see the indexes).
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
    -- the run_at the event asked for (null: none), compared with a re-sent duplicate's;
    -- available_at moves at every retry
    run_at        timestamptz,
    -- a running job's lease, by the database's clock; only running jobs have one
    lease_until   timestamptz,
    -- incremented by every claim; fences completion, renewal, release and failure
    claim_version bigint      NOT NULL DEFAULT 0,
    claimed_by    text,       -- the application_name of the session that claimed it last (a worker's WorkerConfig.Name)
    attempts      integer     NOT NULL DEFAULT 0,
    max_attempts  integer     NOT NULL CHECK (max_attempts > 0),
    last_error    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    attempted_at  timestamptz,
    finished_at   timestamptz,
    CONSTRAINT ordered_jobs_lease_iff_running CHECK ((status = 'running') = (lease_until IS NOT NULL))
);

-- The claim reads the front of this index: ready heads, oldest first. At most one row per key,
-- so a hot key's backlog costs other keys' claims nothing.
CREATE INDEX ordered_jobs_ready ON ordered_jobs (available_at, id)
    WHERE head AND status = 'queued';

-- Lease recovery and the expired-lease maintenance read this one.
CREATE INDEX ordered_jobs_leased ON ordered_jobs (lease_until)
    WHERE status = 'running';

-- The per-key guard, head lookups and an event's identity among open jobs: open jobs only, so
-- a key's finished history is never scanned. There is no index on (key, seq) over all jobs:
-- every row version a job writes would enter it.
CREATE UNIQUE INDEX ordered_jobs_open ON ordered_jobs (key, seq)
    WHERE status IN ('queued', 'running', 'blocked');
COMMENT ON INDEX ordered_jobs_open IS
    'unique (key, seq) among open jobs; across open and finished jobs only ordered_enqueue_events keeps it unique: never insert jobs by hand';

-- An event's identity among finished jobs; an event below one of them is late.
CREATE UNIQUE INDEX ordered_jobs_closed ON ordered_jobs (key, seq)
    WHERE status IN ('done', 'failed');
COMMENT ON INDEX ordered_jobs_closed IS
    'unique (key, seq) among finished jobs; across open and finished jobs only ordered_enqueue_events keeps it unique: never insert jobs by hand';

-- The current head of a key, found without walking its backlog.
CREATE INDEX ordered_jobs_heads ON ordered_jobs (key)
    WHERE head;

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

-- One event as a producer passes it to ordered_enqueue_events (docs/sql.md): the fields of the
-- JSON form, in its order.
CREATE TYPE ordered_event AS (
    key          text,
    seq          bigint,
    kind         text,
    payload      jsonb,
    run_at       timestamptz,
    max_attempts integer
);

-- One event as the enqueue functions work on it: its position in the call (ord), its fields
-- with the defaults applied, and the job it duplicates (existing_id: a stored job's id, 0 for
-- an archived one, minus the ord of an earlier event of the call that it repeats).
CREATE TYPE ordered_enqueue_item AS (
    ord          integer,
    key          text,
    seq          bigint,
    kind         text,
    payload      jsonb,
    run_at       timestamptz,
    max_attempts integer,
    existing_id  bigint
);

-- The queue's counts as of now (ordered status reads this directly; it reads the whole table).
-- Jobs by status: queued + running + done + failed + blocked is every job. failed and blocked
-- are both failed for good; blocked ones hold their key. blocked_keys counts the keys they
-- hold: one each, unless a forced replay of an earlier job failed behind a blocked one.
CREATE VIEW ordered_stats_now AS
SELECT
    count(*) FILTER (WHERE status = 'queued')                    AS queued,
    count(*) FILTER (WHERE status = 'running')                   AS running,
    count(*) FILTER (WHERE status = 'done')                      AS done,
    count(*) FILTER (WHERE status = 'failed')                    AS failed,
    count(*) FILTER (WHERE status = 'blocked')                   AS blocked,
    count(DISTINCT key) FILTER (WHERE status = 'blocked')        AS blocked_keys,
    count(*) FILTER (WHERE status = 'running'
                       AND lease_until <= statement_timestamp()) AS expired_leases,
    min(available_at) FILTER (WHERE head AND status = 'queued'
                                AND available_at <= statement_timestamp()) AS oldest_ready_at
FROM ordered_jobs;

-- The last counts, one row, and when they were taken: the workers' gauges share them, so the
-- table is counted once an interval, not once per worker (see ordered_stats_shared).
CREATE TABLE ordered_stats (
    one             boolean     PRIMARY KEY DEFAULT true CHECK (one),
    queued          bigint      NOT NULL DEFAULT 0,
    running         bigint      NOT NULL DEFAULT 0,
    done            bigint      NOT NULL DEFAULT 0,
    failed          bigint      NOT NULL DEFAULT 0,
    blocked         bigint      NOT NULL DEFAULT 0,
    blocked_keys    bigint      NOT NULL DEFAULT 0,
    expired_leases  bigint      NOT NULL DEFAULT 0,
    oldest_ready_at timestamptz,
    counted_at      timestamptz -- null: never counted
);
INSERT INTO ordered_stats DEFAULT VALUES;
