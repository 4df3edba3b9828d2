-- The queue's row invariants that no index or constraint states, each with the number of rows
-- that break it; only those broken are returned (none: every row keeps them). The functions
-- keep them on every write: the rules of single rows (schema/migrations/005_hot_row_checks.sql
-- says why they are not CHECK constraints) and the head rules (docs/design.md): a head is open
-- and its key's lowest open job, so a key has one head at most. A null compares as a CHECK
-- constraint would take it, as no violation, except in the gap policy: a contiguous key
-- without a gap action breaks it.
WITH jobs AS (
    SELECT count(*) FILTER (WHERE j.key = '')                                          AS empty_key,
           count(*) FILTER (WHERE j.seq < 0)                                           AS negative_seq,
           count(*) FILTER (WHERE j.status NOT IN ('queued', 'running', 'done', 'failed', 'blocked')) AS unknown_status,
           count(*) FILTER (WHERE j.max_attempts <= 0)                                 AS no_attempts,
           count(*) FILTER (WHERE (j.status = 'running') <> (j.lease_until IS NOT NULL)) AS lease_not_running
    FROM ordered_jobs AS j
), heads AS (
    SELECT count(*) FILTER (WHERE h.status IN ('done', 'failed'))                        AS closed_head,
           count(*) FILTER (WHERE EXISTS (SELECT 1 FROM ordered_jobs AS o
                                          WHERE o.key = h.key AND o.seq < h.seq
                                            AND o.status IN ('queued', 'running', 'blocked')))
                                                                                       AS head_not_lowest
    FROM ordered_jobs AS h
    WHERE h.head
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
FROM jobs, heads, keys, LATERAL (VALUES
    ('ordered_jobs: key is not empty', jobs.empty_key),
    ('ordered_jobs: seq is not negative', jobs.negative_seq),
    ('ordered_jobs: status is queued, running, done, failed or blocked', jobs.unknown_status),
    ('ordered_jobs: max_attempts is positive', jobs.no_attempts),
    ('ordered_jobs: a job has a lease exactly when it is running', jobs.lease_not_running),
    ('ordered_jobs: a head is open', heads.closed_head),
    ('ordered_jobs: a head is its key''s lowest open job', heads.head_not_lowest),
    ('ordered_keys: gap_action is wait, proceed or block', keys.unknown_gap_action),
    ('ordered_keys: gap_timeout is positive', keys.gap_timeout_not_positive),
    ('ordered_keys: a contiguous key has a gap policy, with a timeout unless it waits; a default key has none',
     keys.gap_policy_mismatch)
) AS v(invariant, rows)
WHERE v.rows > 0
ORDER BY v.invariant
