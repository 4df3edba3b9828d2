-- Each key's head, and the claim on it, move from the job rows to one narrow row per key,
-- ordered_heads. A claim, a lease renewal and the hand-over from a completed job to its key's
-- next one write that row alone; a job row is written when it is enqueued and when it settles
-- (done, failed, blocked). No index of ordered_jobs covers a column that a settlement writes,
-- and none of ordered_heads covers one that the hand-over writes, so both writes stay on their
-- pages (HOT updates) and enter no index. Keys compare as bytes (COLLATE "C"): every lookup is
-- by key, and a locale's comparison costs more than the rest of an index probe.
--
-- Locking model (as before): heads are changed only with the key row locked first. Enqueuers
-- write it (and hold it until they commit), settlements lock it FOR NO KEY UPDATE, admin
-- operations and archival write it. Claims and renewals take only the head row, never waiting
-- (FOR UPDATE SKIP LOCKED) or fenced by its claim version.

-- One row per key that has a head: an open job (queued or blocked) that no lower open job
-- precedes and, for a contiguous key, that no gap precedes. A key without one is idle (every
-- job finished) or waits on a gap (ordered_gaps).
CREATE TABLE ordered_heads (
    key           text COLLATE "C" PRIMARY KEY,
    -- the head job
    job_id        bigint      NOT NULL,
    seq           bigint      NOT NULL,
    -- queued (claimable from available_at), running (claimed, until lease_until) or blocked
    -- (failed for good under the block policy: later jobs wait for an operator)
    state         text        NOT NULL,
    available_at  timestamptz NOT NULL,
    -- the current claim: its lease (running only), fencing token, attempt count, start and
    -- worker. They are the head job's; the job row gets them when it settles.
    lease_until   timestamptz,
    claim_version bigint      NOT NULL,
    attempts      integer     NOT NULL,
    max_attempts  integer     NOT NULL,
    attempted_at  timestamptz,
    claimed_by    text,
    -- a running batch's last seq: the key's open jobs above seq up to batch_to run under this
    -- claim (docs/design.md, "Batches"); null when the head runs alone
    batch_to      bigint,
    -- every job of the key at or below closed_to has finished (done or failed): the claim's
    -- guard looks for an open job between it and seq, so it never walks the key's history
    closed_to     bigint      NOT NULL,
    -- set by a forced replay of a job below finished ones: the highest finished seq above the
    -- head; an event below it is late
    closed_above  bigint
);

-- The claim reads the front of this index: queued heads, soonest due first; one row a key at
-- most, so a hot key's backlog costs other keys' claims nothing.
CREATE INDEX ordered_heads_ready ON ordered_heads (available_at) WHERE state = 'queued';

-- Lease recovery reads the running heads, soonest lease end first. A claim's lease ends on a
-- grain of a sixteenth of the lease (ordered_lease_end), so a key's claims that follow each
-- other within one grain leave the entry as it is.
CREATE INDEX ordered_heads_leased ON ordered_heads (lease_until) WHERE state = 'running';

-- Heads of running batches (few), for the readers that show a batch's later jobs running.
CREATE INDEX ordered_heads_batches ON ordered_heads (key) WHERE batch_to IS NOT NULL;

-- Small, rewritten at every claim and completion: vacuum often, and leave half of each page
-- free for the new versions of its rows.
ALTER TABLE ordered_heads SET (
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 5000
);

-- The heads of a queue of the previous version: each job that was its key's head.
INSERT INTO ordered_heads (key, job_id, seq, state, available_at, lease_until, claim_version,
                           attempts, max_attempts, attempted_at, claimed_by, batch_to, closed_to)
SELECT j.key, j.id, j.seq,
       CASE j.status WHEN 'running' THEN 'running' WHEN 'blocked' THEN 'blocked' ELSE 'queued' END,
       j.available_at, CASE WHEN j.status = 'running' THEN j.lease_until END, j.claim_version,
       j.attempts, j.max_attempts, j.attempted_at, j.claimed_by,
       CASE WHEN j.status = 'running' AND j.batch_to > j.seq THEN j.batch_to END,
       coalesce((SELECT max(c.seq) FROM ordered_jobs AS c WHERE c.key = j.key AND c.seq < j.seq), -1)
FROM ordered_jobs AS j
WHERE j.head;

-- A job that a crashed batch left running (its attempt counted, its claim version raised)
-- keeps the batch's lease, expired, as crash_lease_until: it runs alone when it becomes its
-- key's head. A job row is never running: a running head's claim is in ordered_heads.
ALTER TABLE ordered_jobs
    ADD COLUMN crash_lease_until timestamptz,
    ADD COLUMN failed_at timestamptz;
UPDATE ordered_jobs SET crash_lease_until = lease_until, status = 'queued'
WHERE status = 'running' AND NOT head;
UPDATE ordered_jobs SET status = 'queued' WHERE status = 'running';
UPDATE ordered_jobs SET failed_at = coalesce(finished_at, now()) WHERE status IN ('failed', 'blocked');

DROP VIEW ordered_stats_now;
DROP VIEW ordered_jobs_now;
DROP VIEW ordered_batch_later;
DROP INDEX ordered_jobs_ready, ordered_jobs_leased, ordered_jobs_open, ordered_jobs_heads,
    ordered_jobs_closed, ordered_jobs_failed, ordered_jobs_finished, ordered_jobs_batches;
ALTER TABLE ordered_jobs DROP COLUMN head, DROP COLUMN lease_until, DROP COLUMN batch_to;

ALTER TABLE ordered_keys ALTER COLUMN key TYPE text COLLATE "C";
ALTER TABLE ordered_jobs ALTER COLUMN key TYPE text COLLATE "C";
ALTER TABLE ordered_gaps ALTER COLUMN key TYPE text COLLATE "C";
ALTER TABLE ordered_gaps_passed ALTER COLUMN key TYPE text COLLATE "C";

-- An event's identity, and a key's jobs in seq order: its history, its head, its backlog.
ALTER TABLE ordered_jobs ADD CONSTRAINT ordered_jobs_key_seq UNIQUE (key, seq);

-- Failed jobs (failed, or blocked holding their key) for inspection, replay and skip.
CREATE INDEX ordered_jobs_failed ON ordered_jobs (key, seq) WHERE failed_at IS NOT NULL;

-- The later jobs of the running batches, each with its batch's head and that head's claim.
CREATE VIEW ordered_batch_later AS
SELECT m.id, m.key, m.seq, h.job_id AS head_id, h.lease_until, h.attempted_at, h.claimed_by
FROM ordered_heads AS h
JOIN ordered_jobs AS m ON m.key = h.key AND m.seq > h.seq AND m.seq <= h.batch_to
WHERE h.state = 'running' AND h.batch_to > h.seq AND m.status = 'queued';

-- Every job as it runs: the head with its claim (ordered_heads), a later job of a running batch
-- as its claim returned it (running, under the batch's lease, its attempt counted and its
-- claim version raised), a job a crashed batch left running as running under that batch's
-- expired lease. row_status is the status its row has.
CREATE VIEW ordered_jobs_now AS
SELECT j.id, j.key, j.seq, j.kind, j.payload,
       CASE WHEN s.head AND h.state = 'running' THEN 'running'
            WHEN s.covered OR j.crash_lease_until IS NOT NULL THEN 'running'
            ELSE j.status END AS status,
       j.status AS row_status,
       coalesce(s.head, false) AS head,
       CASE WHEN s.head THEN h.attempts WHEN s.covered THEN j.attempts + 1 ELSE j.attempts END AS attempts,
       j.max_attempts,
       CASE WHEN s.head THEN h.claim_version WHEN s.covered THEN j.claim_version + 1
            ELSE j.claim_version END AS claim_version,
       j.last_error,
       CASE WHEN s.head OR s.covered THEN h.lease_until ELSE j.crash_lease_until END AS lease_until,
       CASE WHEN s.head THEN h.available_at ELSE j.available_at END AS available_at,
       j.run_at, j.created_at,
       CASE WHEN s.head OR s.covered THEN h.attempted_at ELSE j.attempted_at END AS attempted_at,
       j.finished_at,
       CASE WHEN s.head OR s.covered THEN h.claimed_by ELSE j.claimed_by END AS claimed_by
FROM ordered_jobs AS j
LEFT JOIN ordered_heads AS h ON h.key = j.key
CROSS JOIN LATERAL (
    SELECT h.job_id = j.id AS head,
           h.state = 'running' AND j.seq > h.seq AND j.seq <= h.batch_to AND j.status = 'queued' AS covered
) AS s;

-- The counts as of now (ordered status reads this directly; it reads the whole table). Jobs by
-- status as ordered_jobs_now has them: queued + running + done + failed + blocked is every
-- job; failed and blocked are both failed for good, blocked ones hold their key.
CREATE VIEW ordered_stats_now AS
WITH heads AS (
    SELECT count(*) FILTER (WHERE h.state = 'running')                            AS running,
           count(*) FILTER (WHERE h.state = 'running'
                              AND h.lease_until <= statement_timestamp())         AS expired,
           min(h.available_at) FILTER (WHERE h.state = 'queued'
                                         AND h.available_at <= statement_timestamp()) AS oldest_ready_at
    FROM ordered_heads AS h
), later AS (
    SELECT count(*) AS running, count(*) FILTER (WHERE b.lease_until <= statement_timestamp()) AS expired
    FROM ordered_batch_later AS b
), jobs AS (
    SELECT count(*) FILTER (WHERE j.status = 'queued')                            AS queued,
           count(*) FILTER (WHERE j.status = 'queued' AND j.crash_lease_until IS NOT NULL) AS crashed,
           count(*) FILTER (WHERE j.status = 'done')                              AS done,
           count(*) FILTER (WHERE j.status = 'failed')                            AS failed,
           count(*) FILTER (WHERE j.status = 'blocked')                           AS blocked,
           count(DISTINCT j.key) FILTER (WHERE j.status = 'blocked')              AS blocked_keys
    FROM ordered_jobs AS j
)
SELECT jobs.queued - heads.running - later.running - jobs.crashed AS queued,
       heads.running + later.running + jobs.crashed              AS running,
       jobs.done, jobs.failed, jobs.blocked, jobs.blocked_keys,
       heads.expired + later.expired + jobs.crashed              AS expired_leases,
       heads.oldest_ready_at,
       (SELECT count(*) FROM ordered_gaps)                       AS gap_keys,
       (SELECT count(*) FROM ordered_gaps WHERE blocked_at IS NOT NULL) AS gap_blocked_keys,
       (SELECT min(since) FROM ordered_gaps)                     AS oldest_gap_at
FROM heads, later, jobs;

-- Functions whose signatures or results change, or that go: their files (if any) create the
-- new definitions.
DROP FUNCTION IF EXISTS ordered_enqueue_one(text, bigint, text, jsonb, timestamptz, integer, integer);
DROP FUNCTION IF EXISTS ordered_enqueue_append_prepare(text[], bigint[], bigint[], timestamptz[], integer);
DROP FUNCTION IF EXISTS ordered_heads_refresh(text[]);
DELETE FROM ordered_functions
WHERE name IN ('ordered_enqueue_one', 'ordered_enqueue_append_prepare', 'ordered_heads_refresh');

-- Where archival goes on from: it walks the keys in key order, a bounded stretch a call, and
-- deletes each key's old done jobs (ordered_archive).
CREATE TABLE ordered_archive_cursor (
    one       boolean PRIMARY KEY DEFAULT true CHECK (one),
    after_key text COLLATE "C" NOT NULL DEFAULT ''
);
INSERT INTO ordered_archive_cursor DEFAULT VALUES;

-- A contiguous key's next seq is kept in its row from now on: whatever finishes a job of the
-- key moves it past that job. A queue of the previous version read it from the finished jobs.
UPDATE ordered_keys AS k
SET next_seq = greatest(k.next_seq,
                        (SELECT max(c.seq) + 1 FROM ordered_jobs AS c
                         WHERE c.key = k.key AND c.status IN ('done', 'failed')))
WHERE k.next_seq IS NOT NULL;

-- The row type of ordered_jobs_claim's result, which ordered_jobs_claim_batch keeps.
CREATE TYPE ordered_claimed_job AS (
    id            bigint,
    key           text,
    seq           bigint,
    kind          text,
    payload       jsonb,
    attempts      integer,
    max_attempts  integer,
    claim_version bigint,
    lease_until   timestamptz,
    created_at    timestamptz,
    available_at  timestamptz,
    attempted_at  timestamptz,
    last_error    text,
    recovered     boolean
);

-- The jobs a crashed batch left running (few, and only until each becomes its key's head), for
-- the readers that show running jobs.
CREATE INDEX ordered_jobs_crashed ON ordered_jobs (crash_lease_until) WHERE crash_lease_until IS NOT NULL;
