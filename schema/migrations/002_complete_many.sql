-- Completions in batches, each able to claim the next jobs of its keys. A worker completes, in
-- one statement, every job whose handler returned while its previous batch was in flight,
-- and takes in the same statement the job each completion made ready: one commit per batch
-- instead of one per job, and one new row version per job for promotion and claim together.

-- ordered_jobs_complete marks done each job of p_ids whose claim p_versions (same position)
-- is still current with a live lease, and hands each of their keys to its next open job. Up
-- to p_next_limit of those next jobs that are due are claimed, leased for p_lease, by the
-- same update that makes them heads. It returns one row per completed claim (completed true,
-- only id and claim_version set) and one per claimed job (completed false); the claims not
-- returned were lost and nothing changed for them.
CREATE FUNCTION ordered_jobs_complete(p_ids bigint[], p_versions bigint[],
                                      p_next_limit integer DEFAULT 0,
                                      p_lease interval DEFAULT NULL)
RETURNS TABLE (completed boolean, id bigint, key text, seq bigint, kind text, payload jsonb,
               attempts integer, max_attempts integer, claim_version bigint,
               lease_until timestamptz, created_at timestamptz, available_at timestamptz,
               attempted_at timestamptz, last_error text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_done bigint[];
    v_done_versions bigint[];
    v_keys text[];
    v_next bigint[];
    v_claim bigint[];
BEGIN
    -- Key rows first and in key order, as one enqueue call locks them, so the two do not
    -- deadlock (a transaction that enqueues to several keys out of key order can; the worker
    -- retries the batch); shared, so completers never wait for each other. An enqueue of one of these keys that
    -- is in flight is waited for, and the statements below see its jobs.
    PERFORM 1 FROM ordered_keys AS k
    WHERE k.key = ANY (ARRAY(SELECT j.key FROM ordered_jobs AS j WHERE j.id = ANY (p_ids)))
    ORDER BY k.key
    FOR SHARE;

    -- Only the primary key can serve this update. Its lease condition stands for "running
    -- with a live lease" (the CHECK below); a status condition would let the planner walk
    -- ordered_jobs_leased instead, whose statistics say it is small while a queue's partial
    -- indexes are full of dead entries. Rows whose claim is not current are not locked.
    WITH done AS (
        UPDATE ordered_jobs AS j
        SET status = 'done', head = false, lease_until = NULL, finished_at = clock_timestamp()
        WHERE j.id = ANY (p_ids)
          -- by (id, version) pair: a batch may hold a stale and the current claim of one job
          AND EXISTS (SELECT 1 FROM unnest(p_ids, p_versions) AS c(id, version)
                      WHERE c.id = j.id AND c.version = j.claim_version)
          AND j.lease_until > clock_timestamp()
        RETURNING j.id, j.key, j.claim_version
    )
    SELECT array_agg(d.id), array_agg(d.claim_version), array_agg(DISTINCT d.key)
    INTO v_done, v_done_versions, v_keys
    FROM done AS d;
    IF v_done IS NULL THEN
        RETURN;
    END IF;

    -- Each completed job was its key's head (a running job always is), so the key's next
    -- head is now its lowest open job, found per key through ordered_jobs_open. The due ones,
    -- oldest first, up to p_next_limit, are claimed.
    SELECT array_agg(n.id),
           (array_agg(n.id ORDER BY n.available_at, n.id)
                FILTER (WHERE n.status = 'queued' AND n.available_at <= statement_timestamp()))
               [1:greatest(p_next_limit, 0)]
    INTO v_next, v_claim
    FROM unnest(v_keys) AS k(key)
    CROSS JOIN LATERAL (
        SELECT o.id, o.status, o.available_at FROM ordered_jobs AS o
        WHERE o.key = k.key AND o.status IN ('queued', 'running', 'blocked')
        ORDER BY o.seq LIMIT 1) AS n;

    RETURN QUERY SELECT true, d.id, NULL::text, NULL::bigint, NULL::text, NULL::jsonb,
                        NULL::integer, NULL::integer, d.version, NULL::timestamptz,
                        NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::text
                 FROM unnest(v_done, v_done_versions) AS d(id, version);

    IF v_next IS NULL THEN
        RETURN;
    END IF;
    v_claim := coalesce(v_claim, '{}');
    IF cardinality(v_claim) > 0 AND p_lease IS NULL THEN
        RAISE EXCEPTION 'ordered_jobs_complete: p_lease is required to claim next jobs';
    END IF;
    -- One update makes them heads and, for the claimed ones, does the claim's update
    -- (job_claim_many.sql) too. The lease starts now, not at the start of the statement: it
    -- may have waited for a key.
    RETURN QUERY
    WITH promoted AS (
        UPDATE ordered_jobs AS j
        SET head = true,
            status = CASE WHEN j.id = ANY (v_claim) THEN 'running' ELSE j.status END,
            attempts = CASE WHEN j.id = ANY (v_claim) THEN j.attempts + 1 ELSE j.attempts END,
            claim_version = CASE WHEN j.id = ANY (v_claim) THEN j.claim_version + 1
                                 ELSE j.claim_version END,
            lease_until = CASE WHEN j.id = ANY (v_claim) THEN clock_timestamp() + p_lease
                               ELSE j.lease_until END,
            attempted_at = CASE WHEN j.id = ANY (v_claim) THEN clock_timestamp()
                                ELSE j.attempted_at END
        WHERE j.id = ANY (v_next) AND NOT j.head
        RETURNING j.*
    )
    SELECT false, p.id, p.key, p.seq, p.kind, p.payload, p.attempts, p.max_attempts,
           p.claim_version, p.lease_until, p.created_at, p.available_at, p.attempted_at,
           p.last_error
    FROM promoted AS p
    WHERE p.status = 'running';
END
$$;

-- A lease is set exactly while a job runs; completion relies on it. NOT VALID: existing rows
-- already obey it (every writer clears the lease), and validating would scan the table under
-- an exclusive lock.
ALTER TABLE ordered_jobs ADD CONSTRAINT ordered_jobs_lease_iff_running
    CHECK ((status = 'running') = (lease_until IS NOT NULL)) NOT VALID;

-- Kept for workers of the previous version during a rolling upgrade: a batch of one.
CREATE OR REPLACE FUNCTION ordered_job_complete(p_id bigint, p_version bigint) RETURNS boolean
LANGUAGE sql AS $$
    SELECT EXISTS (SELECT 1 FROM ordered_jobs_complete(ARRAY[p_id], ARRAY[p_version]) AS c
                   WHERE c.completed)
$$;
