-- The queue's row invariants that no index or constraint states, each with the number of rows
-- that break it; only those broken are returned (none: every row keeps them). The functions
-- keep them on every write: the rules of single rows (schema/migrations/005_hot_row_checks.sql
-- says why they are not CHECK constraints) and the head rules (docs/design.md): a key's head
-- row holds its lowest open job, with its claim, and a key with an open job has one unless it
-- waits on a gap. A null compares as a CHECK constraint would take it, as no violation, except
-- in the gap policy: a contiguous key without a gap action breaks it.
WITH jobs AS (
    SELECT count(*) FILTER (WHERE j.key = '')                                          AS empty_key,
           count(*) FILTER (WHERE j.seq < 0)                                           AS negative_seq,
           count(*) FILTER (WHERE j.status NOT IN ('queued', 'done', 'failed', 'blocked')) AS unknown_status,
           count(*) FILTER (WHERE j.max_attempts <= 0)                                 AS no_attempts,
           count(*) FILTER (WHERE (j.status IN ('failed', 'blocked')) <> (j.failed_at IS NOT NULL)) AS failed_at_not_failed,
           count(*) FILTER (WHERE j.crash_lease_until IS NOT NULL
                              AND (j.status <> 'queued'
                                   OR EXISTS (SELECT 1 FROM ordered_heads AS h WHERE h.job_id = j.id)))
                                                                                       AS crashed_not_queued
    FROM ordered_jobs AS j
), heads AS (
    SELECT count(*) FILTER (WHERE h.state NOT IN ('queued', 'running', 'blocked'))   AS unknown_state,
           count(*) FILTER (WHERE (h.state = 'running') <> (h.lease_until IS NOT NULL)) AS lease_not_running,
           count(*) FILTER (WHERE h.batch_to IS NOT NULL AND h.state <> 'running')   AS batch_not_running,
           count(*) FILTER (WHERE j.id IS NULL OR j.key <> h.key OR j.seq <> h.seq
                              OR j.max_attempts <> h.max_attempts)                   AS head_not_its_job,
           count(*) FILTER (WHERE j.status NOT IN ('queued', 'blocked')
                              OR (j.status = 'blocked') <> (h.state = 'blocked'))     AS closed_head,
           count(*) FILTER (WHERE EXISTS (SELECT 1 FROM ordered_jobs AS o
                                          WHERE o.key = h.key AND o.seq < h.seq
                                            AND o.status IN ('queued', 'blocked')))   AS head_not_lowest,
           count(*) FILTER (WHERE h.closed_to >= h.seq)                              AS closed_to_not_below
    FROM ordered_heads AS h
    LEFT JOIN ordered_jobs AS j ON j.id = h.job_id
), open_keys AS (
    -- a key with an open job has a head, unless it is contiguous and its lowest open job is
    -- above its next seq (it waits on a gap)
    SELECT count(*) AS headless
    FROM (SELECT o.key, min(o.seq) AS seq FROM ordered_jobs AS o
          WHERE o.status IN ('queued', 'blocked') GROUP BY o.key) AS o
    JOIN ordered_keys AS k ON k.key = o.key
    WHERE NOT EXISTS (SELECT 1 FROM ordered_heads AS h WHERE h.key = o.key)
      AND (k.next_seq IS NULL OR o.seq <= greatest(k.next_seq, k.archived_seq + 1))
), keys AS (
    SELECT count(*) FILTER (WHERE k.gap_action NOT IN ('wait', 'proceed', 'block'))     AS unknown_gap_action,
           count(*) FILTER (WHERE k.gap_timeout <= interval '0')                       AS gap_timeout_not_positive,
           count(*) FILTER (WHERE NOT coalesce((k.next_seq IS NULL AND k.gap_action IS NULL AND k.gap_timeout IS NULL)
                                                OR (k.next_seq IS NOT NULL AND (k.gap_action = 'wait') = (k.gap_timeout IS NULL)),
                                                false))
                                                                                       AS gap_policy_mismatch
    FROM ordered_keys AS k
)
SELECT v.invariant, v.rows
FROM jobs, heads, open_keys, keys, LATERAL (VALUES
    ('ordered_jobs: key is not empty', jobs.empty_key),
    ('ordered_jobs: seq is not negative', jobs.negative_seq),
    ('ordered_jobs: status is queued, done, failed or blocked', jobs.unknown_status),
    ('ordered_jobs: max_attempts is positive', jobs.no_attempts),
    ('ordered_jobs: failed_at is set exactly when a job failed or blocked', jobs.failed_at_not_failed),
    ('ordered_jobs: a crashed batch''s mark is on a queued job that is no head', jobs.crashed_not_queued),
    ('ordered_heads: state is queued, running or blocked', heads.unknown_state),
    ('ordered_heads: a head has a lease exactly when it is running', heads.lease_not_running),
    ('ordered_heads: only a running head leads a batch', heads.batch_not_running),
    ('ordered_heads: a head is its job''s key, seq and max_attempts', heads.head_not_its_job),
    ('ordered_heads: a head is open, blocked exactly when its job is', heads.closed_head),
    ('ordered_heads: a head is its key''s lowest open job', heads.head_not_lowest),
    ('ordered_heads: closed_to is below the head', heads.closed_to_not_below),
    ('ordered_heads: a key with an open job has a head unless it waits on a gap', open_keys.headless),
    ('ordered_keys: gap_action is wait, proceed or block', keys.unknown_gap_action),
    ('ordered_keys: gap_timeout is positive', keys.gap_timeout_not_positive),
    ('ordered_keys: a contiguous key has a gap policy, with a timeout unless it waits; a default key has none',
     keys.gap_policy_mismatch)
) AS v(invariant, rows)
WHERE v.rows > 0
ORDER BY v.invariant
