-- ordered_jobs_complete completes a batch of claims (p_ids and p_versions, same positions) whose
-- leases are live, hands each key to its next open job and claims up to p_next_limit of those
-- next jobs, leased for p_lease: completing a job and starting its key's next one in one
-- statement. It returns the completed claims (completed true), then the claimed jobs; the
-- claims not returned were lost, and nothing changed for them.
--
-- A claim is current when its key's head row holds it (running, lease live, this version), or,
-- for a later job of a running batch (ordered_jobs_extend), when the head's batch covers the
-- job and the version is the one the batch's claim returned (the job's own plus one). A
-- batch's later jobs complete only as a prefix: none above a job of the batch the call leaves
-- out. The key's next head is then its lowest open job above the last one completed. One that
-- the completed batch still covers (the job its handler failed) is handed the batch's claim;
-- one a crashed batch left running becomes the head as a running claim with that batch's
-- expired lease (it is recovered alone); a due one is claimed, up to p_next_limit, oldest
-- first; any other becomes the queued (or blocked) head. A contiguous key's next job becomes
-- its head only if its seq is at most the key's next seq, which the completion moved past the
-- completed jobs; otherwise the key waits on a gap (ordered_gaps_sync). A key with no open job
-- left has no head row.
--
-- Per job it writes the head row (the hand-over: same page, no index entry) and the job's row
-- (its status and claim, also on its page): the jobs' indexes cover no column either write.
-- It is two statements whatever the batch (the key rows' lock, then the rest), and runs in
-- time linear in its batch: the versions are looked up in a jsonb object keyed by id, whatever
-- the plan, and every read and write is a probe by key or id.
CREATE OR REPLACE FUNCTION ordered_jobs_complete(p_ids bigint[], p_versions bigint[],
                                                 p_next_limit integer DEFAULT 0,
                                                 p_lease interval DEFAULT NULL)
RETURNS TABLE (completed boolean, id bigint, key text, seq bigint, kind text, payload jsonb,
               attempts integer, max_attempts integer, claim_version bigint,
               lease_until timestamptz, created_at timestamptz, available_at timestamptz,
               attempted_at timestamptz, last_error text)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_versions jsonb;
    v_keys text[];
    v_cont text[];
BEGIN
    -- Key rows first and in key order, as one enqueue call locks them, so the two do not
    -- deadlock (a transaction that enqueues to several keys out of key order can; the worker
    -- retries the batch). An enqueue of one of these keys that is in flight is waited for, and
    -- the statement below, whose snapshot is taken after this one, sees its jobs. The contiguous
    -- ones among them are noted. Beside, the claim each job is completed for: the highest
    -- version the batch holds for it (a batch may hold a stale and the current claim of one
    -- job; claims only raise the version, and the stale one is lost either way).
    SELECT array_agg(l.key), array_agg(l.key) FILTER (WHERE l.contiguous),
           (SELECT jsonb_object_agg(u.id::text, u.version)
            FROM (SELECT u.id, max(u.version) AS version
                  FROM unnest(p_ids, p_versions) AS u(id, version)
                  GROUP BY u.id) AS u)
    INTO v_keys, v_cont, v_versions
    FROM (SELECT k.key, k.next_seq IS NOT NULL AS contiguous FROM ordered_keys AS k
          WHERE k.key = ANY (ARRAY(SELECT j.key FROM ordered_jobs AS j WHERE j.id = ANY (p_ids)))
          ORDER BY k.key
          FOR NO KEY UPDATE) AS l;
    IF v_keys IS NULL THEN
        RETURN;
    END IF;

    RETURN QUERY
    WITH c AS MATERIALIZED (
        -- Per key whose head's claim is in the batch: the head, the last job the batch completes
        -- (done_to: the head, or the end of the prefix of its batch given), and the key's next
        -- open job above it, with what becomes of it (fate).
        SELECT h.key, h.job_id AS head, h.claim_version AS version, h.seq, h.attempts,
               h.attempted_at AS attempted, h.claimed_by, h.lease_until AS lease, h.batch_to,
               h.closed_above, d.done_to,
               n.id AS next_id, n.seq AS next_seq, n.status AS next_status,
               n.available_at AS next_available, n.claim_version AS next_version,
               n.attempts AS next_attempts, n.max_attempts AS next_max,
               n.attempted_at AS next_attempted, n.claimed_by AS next_claimed_by,
               n.crash_lease_until AS next_crashed, n.kind AS next_kind, n.payload AS next_payload,
               n.created_at AS next_created, n.last_error AS next_error,
               CASE
                   WHEN n.id IS NULL THEN 'gone'
                   WHEN ck.key IS NOT NULL
                        AND n.seq > greatest(k.next_seq, k.archived_seq + 1, d.done_to + 1) THEN 'gone'
                   WHEN n.crash_lease_until IS NOT NULL THEN 'crashed'
                   WHEN n.seq <= h.batch_to AND n.status = 'queued'
                        AND n.available_at <= statement_timestamp() THEN 'hand'
                   WHEN n.status = 'queued' AND n.available_at <= statement_timestamp()
                        AND p_lease IS NOT NULL THEN 'claim'
                   ELSE 'wait' END AS fate
        FROM unnest(v_keys) AS l(key)
        CROSS JOIN LATERAL (SELECT h.* FROM ordered_heads AS h WHERE h.key = l.key OFFSET 0) AS h
        CROSS JOIN LATERAL (
            SELECT CASE WHEN h.batch_to IS NULL OR h.batch_to <= h.seq THEN h.seq
                        ELSE coalesce((
                            SELECT max(o.seq) FROM ordered_jobs AS o
                            WHERE o.key = h.key AND o.seq > h.seq AND o.seq <= h.batch_to
                              AND o.status = 'queued'
                              AND o.seq < coalesce((
                                  SELECT min(x.seq) FROM ordered_jobs AS x
                                  WHERE x.key = h.key AND x.seq > h.seq AND x.seq <= h.batch_to
                                    AND x.status = 'queued'
                                    AND (v_versions ->> x.id::text)::bigint IS DISTINCT FROM x.claim_version + 1),
                                  h.batch_to + 1)), h.seq) END AS done_to) AS d
        LEFT JOIN LATERAL (
            SELECT o.* FROM ordered_jobs AS o
            WHERE o.key = h.key AND o.seq > d.done_to AND o.status IN ('queued', 'blocked')
            ORDER BY o.seq LIMIT 1) AS n ON true
        LEFT JOIN unnest(v_cont) AS ck(key) ON ck.key = h.key
        LEFT JOIN LATERAL (SELECT k.next_seq, k.archived_seq FROM ordered_keys AS k
                           WHERE ck.key IS NOT NULL AND k.key = h.key OFFSET 0) AS k ON true
        WHERE h.lease_until > clock_timestamp()
          AND (v_versions ->> h.job_id::text)::bigint = h.claim_version
    ), moves AS (
        -- the due next jobs are claimed oldest first, up to p_next_limit
        SELECT c.*, c.fate = 'claim'
                    AND row_number() OVER (PARTITION BY c.fate = 'claim' ORDER BY c.next_available, c.next_id)
                        <= greatest(p_next_limit, 0) AS take
        FROM c
        WHERE c.fate <> 'gone'
    ), moved AS (
        -- The heads move on, each only if its claim is still the one read above (a recovery or
        -- a renewal that committed meanwhile is seen here, on the row's newest version).
        UPDATE ordered_heads AS h
        SET job_id = m.next_id,
            seq = m.next_seq,
            state = CASE WHEN m.fate IN ('crashed', 'hand') OR m.take THEN 'running'
                         WHEN m.next_status = 'blocked' THEN 'blocked' ELSE 'queued' END,
            -- a running head keeps the available_at it had (it is read only while queued)
            available_at = CASE WHEN m.fate IN ('crashed', 'hand') OR m.take THEN h.available_at
                                ELSE m.next_available END,
            lease_until = CASE WHEN m.fate = 'crashed' THEN m.next_crashed
                               WHEN m.fate = 'hand' THEN greatest(m.lease, ordered_lease_end(clock_timestamp(), p_lease))
                               WHEN m.take THEN ordered_lease_end(clock_timestamp(), p_lease) END,
            claim_version = m.next_version + CASE WHEN m.fate = 'hand' OR m.take THEN 1 ELSE 0 END,
            attempts = m.next_attempts + CASE WHEN m.fate = 'hand' OR m.take THEN 1 ELSE 0 END,
            max_attempts = m.next_max,
            attempted_at = CASE WHEN m.fate = 'hand' THEN m.attempted WHEN m.take THEN clock_timestamp()
                                ELSE m.next_attempted END,
            claimed_by = CASE WHEN m.fate = 'hand' THEN m.claimed_by
                              WHEN m.take THEN nullif(current_setting('application_name'), '')
                              ELSE m.next_claimed_by END,
            batch_to = CASE WHEN m.fate = 'hand' AND m.batch_to > m.next_seq THEN m.batch_to END,
            closed_to = m.done_to,
            closed_above = CASE WHEN m.closed_above > m.next_seq THEN m.closed_above END
        FROM moves AS m
        WHERE h.key = m.key AND h.job_id = m.head AND h.claim_version = m.version
          AND h.lease_until > clock_timestamp()
        RETURNING h.key, h.job_id, h.seq, h.state, h.attempts, h.max_attempts, h.claim_version,
                  h.lease_until, h.available_at, h.attempted_at, m.fate
    ), gone AS (
        -- a key with no open job left, or waiting on a gap, has no head
        DELETE FROM ordered_heads AS h
        USING c
        WHERE c.fate = 'gone' AND h.key = c.key AND h.job_id = c.head AND h.claim_version = c.version
          AND h.lease_until > clock_timestamp()
        RETURNING h.key
    ), settled AS (
        SELECT m.key FROM moved AS m UNION ALL SELECT g.key FROM gone AS g
    ), done AS (
        -- The jobs done: each head at its claim, and the batches' later jobs it covered, at the
        -- claim each was returned with.
        UPDATE ordered_jobs AS j
        SET status = 'done',
            attempts = CASE WHEN j.id = c.head THEN c.attempts ELSE j.attempts + 1 END,
            claim_version = CASE WHEN j.id = c.head THEN c.version ELSE j.claim_version + 1 END,
            attempted_at = c.attempted,
            claimed_by = c.claimed_by,
            finished_at = clock_timestamp()
        FROM c
        WHERE c.key IN (SELECT s.key FROM settled AS s)
          AND j.key = c.key AND j.seq >= c.seq AND j.seq <= c.done_to
          AND (j.id = c.head OR (j.status = 'queued'
                                 AND (v_versions ->> j.id::text)::bigint = j.claim_version + 1))
        RETURNING j.id, j.claim_version
    ), crashed AS (
        -- a job a crashed batch marked that became the head leaves its mark on the head row
        UPDATE ordered_jobs AS j SET crash_lease_until = NULL
        FROM moved AS m
        WHERE m.fate = 'crashed' AND j.id = m.job_id
    ), contiguous AS (
        -- a contiguous key's next seq moves past what it completed
        UPDATE ordered_keys AS k SET next_seq = greatest(k.next_seq, c.done_to + 1)
        FROM c
        WHERE c.key = ANY (v_cont) AND c.key IN (SELECT s.key FROM settled AS s) AND k.key = c.key
    )
    SELECT true, d.id, NULL::text, NULL::bigint, NULL::text, NULL::jsonb,
           NULL::integer, NULL::integer, d.claim_version, NULL::timestamptz,
           NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::text
    FROM done AS d
    UNION ALL
    -- The next jobs claimed now, for the caller to run. A job handed a batch's claim is not
    -- among them (the batch's worker holds its claim already), nor is a crashed batch's job (a
    -- claim recovers it).
    SELECT false, m.job_id, m.key, m.seq, c.next_kind, c.next_payload, m.attempts, m.max_attempts,
           m.claim_version, m.lease_until, c.next_created, m.available_at, m.attempted_at, c.next_error
    FROM moved AS m
    JOIN c ON c.key = m.key
    WHERE m.fate = 'claim' AND m.state = 'running';

    IF v_cont IS NOT NULL THEN
        PERFORM ordered_gaps_sync(v_cont);
    END IF;
END
$$;
COMMENT ON FUNCTION ordered_jobs_complete(bigint[], bigint[], integer, interval) IS
'Internal to ordered: completes a batch of claims and claims the keys'' next jobs (workers). Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
