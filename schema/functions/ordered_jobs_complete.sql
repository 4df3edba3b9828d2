-- ordered_jobs_complete completes a batch of claims (p_ids and p_versions, same positions) whose
-- leases are live, hands each key to its next open job and claims up to p_next_limit of those
-- next jobs, leased for p_lease: completing a job and starting its key's next one in one
-- statement. It returns the completed claims (completed true), then the claimed jobs; the
-- claims not returned were lost, and nothing changed for them.
--
-- A contiguous key's next job becomes its head only if its seq is at most the key's next seq,
-- which the completed jobs moved past them (ordered_key_next_seq); otherwise the key waits on
-- a gap (ordered_gaps_sync). Several consecutive jobs of one key may be completed at once.
--
-- It runs in time linear in its batch: the versions are looked up in a jsonb object keyed by
-- id, whatever the plan, and every update reaches its rows through the primary key.
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
AS $$
#variable_conflict use_column
DECLARE
    v_versions jsonb;
    v_done bigint[];
    v_done_versions bigint[];
    v_keys text[];
    v_next bigint[];
    v_claim bigint[];
    v_rest bigint[];
    v_cont text[];
    v_bkeys text[];
    v_bseqs bigint[];
    v_btos bigint[];
    v_bleases timestamptz[];
    v_battempted timestamptz[];
    v_bclaimed text[];
    v_bstops bigint[];
    v_hand bigint[];
BEGIN
    -- Key rows first and in key order, as one enqueue call locks them, so the two do not
    -- deadlock (a transaction that enqueues to several keys out of key order can; the worker
    -- retries the batch); shared, so completers never wait for each other. An enqueue of one
    -- of these keys that is in flight is waited for, and the statements below see its jobs.
    -- The contiguous ones among them are noted.
    SELECT array_agg(l.key) FILTER (WHERE l.contiguous) INTO v_cont
    FROM (SELECT k.key, k.next_seq IS NOT NULL AS contiguous FROM ordered_keys AS k
          WHERE k.key = ANY (ARRAY(SELECT j.key FROM ordered_jobs AS j WHERE j.id = ANY (p_ids)))
          ORDER BY k.key
          FOR SHARE) AS l;

    -- The claim each job is completed for: the highest version the batch holds for it. A
    -- batch may hold a stale and the current claim of one job (claims only raise the
    -- version); the stale one is lost either way.
    SELECT jsonb_object_agg(c.id::text, c.version) INTO v_versions
    FROM (SELECT u.id, max(u.version) AS version
          FROM unnest(p_ids, p_versions) AS u(id, version)
          GROUP BY u.id) AS c;

    -- Only the primary key can serve this update. Its lease condition stands for "running
    -- with a live lease" (a job has a lease exactly when it runs); a status condition would
    -- let the planner walk ordered_jobs_leased instead, whose statistics say it is small while
    -- a queue's partial indexes are full of dead entries. Rows whose claim is not current are
    -- not locked.
    WITH done AS (
        UPDATE ordered_jobs AS j
        SET status = 'done', head = false, lease_until = NULL, finished_at = clock_timestamp()
        WHERE j.id = ANY (p_ids)
          AND (v_versions ->> j.id::text)::bigint = j.claim_version
          AND j.lease_until > clock_timestamp()
        RETURNING j.id, j.key, j.seq, j.claim_version, j.batch_to, j.attempted_at, j.claimed_by,
                  -- the batch's lease, as this statement's snapshot has it, for its hand-over
                  CASE WHEN j.batch_to IS NOT NULL
                       THEN (SELECT o.lease_until FROM ordered_jobs AS o WHERE o.id = j.id) END AS lease_until
    )
    SELECT array_agg(d.id), array_agg(d.claim_version), array_agg(DISTINCT d.key),
           array_agg(d.key) FILTER (WHERE d.batch_to > d.seq),
           array_agg(d.seq) FILTER (WHERE d.batch_to > d.seq),
           array_agg(d.batch_to) FILTER (WHERE d.batch_to > d.seq),
           array_agg(d.lease_until) FILTER (WHERE d.batch_to > d.seq),
           array_agg(d.attempted_at) FILTER (WHERE d.batch_to > d.seq),
           array_agg(d.claimed_by) FILTER (WHERE d.batch_to > d.seq)
    INTO v_done, v_done_versions, v_keys, v_bkeys, v_bseqs, v_btos, v_bleases, v_battempted, v_bclaimed
    FROM done AS d;
    IF v_done IS NULL THEN
        RETURN;
    END IF;

    -- The later jobs of the batches led by the jobs just completed, still queued: claimed
    -- through their head (ordered_jobs_extend), at the version the claim returned, and only
    -- as a prefix: a batch's jobs above the first of its open jobs that this call does not
    -- complete stay as they are (one walk of the batch's entries of ordered_jobs_open each).
    IF v_bkeys IS NOT NULL THEN
        v_bstops := ARRAY(
            SELECT (SELECT min(o.seq) FROM ordered_jobs AS o
                    WHERE o.key = b.key AND o.status IN ('queued', 'running', 'blocked')
                      AND o.seq > b.seq AND o.seq <= b.batch_to
                      AND NOT (o.id = ANY (p_ids)
                               AND (v_versions ->> o.id::text)::bigint = o.claim_version + 1))
            FROM unnest(v_bkeys, v_bseqs, v_btos) WITH ORDINALITY AS b(key, seq, batch_to, ord)
            ORDER BY b.ord);
        WITH done AS (
            UPDATE ordered_jobs AS j
            SET status = 'done', head = false, finished_at = clock_timestamp(),
                attempts = j.attempts + 1, claim_version = j.claim_version + 1,
                attempted_at = b.attempted_at, claimed_by = b.claimed_by
            FROM unnest(v_bkeys, v_bseqs, v_btos, v_battempted, v_bclaimed, v_bstops)
                     AS b(key, seq, batch_to, attempted_at, claimed_by, stop)
            WHERE j.id = ANY (p_ids)
              AND (v_versions ->> j.id::text)::bigint = j.claim_version + 1
              AND j.key = b.key AND j.seq > b.seq AND j.seq <= b.batch_to
              AND (b.stop IS NULL OR j.seq < b.stop)
              AND j.status NOT IN ('running', 'blocked', 'done', 'failed') AND NOT j.head
            RETURNING j.id, j.claim_version
        )
        SELECT v_done || coalesce(array_agg(d.id), '{}'), v_done_versions || coalesce(array_agg(d.claim_version), '{}')
        INTO v_done, v_done_versions
        FROM done AS d;
    END IF;

    -- Each completed job led its key (a running job always does, alone or at the head of a
    -- batch), so the key's next head is now its lowest open job, found per key through
    -- ordered_jobs_open. One that the batch of a completed job still covers is handed that
    -- batch's claim; of the others, the due ones, oldest first, up to p_next_limit, are
    -- claimed.
    SELECT array_agg(n.id),
           (array_agg(n.id ORDER BY n.available_at, n.id)
                FILTER (WHERE n.status = 'queued' AND n.available_at <= statement_timestamp()
                          AND b.key IS NULL))
               [1:greatest(p_next_limit, 0)],
           array_agg(n.id) FILTER (WHERE b.key IS NOT NULL)
    INTO v_next, v_claim, v_hand
    FROM unnest(v_keys) AS k(key)
    CROSS JOIN LATERAL (
        SELECT o.id, o.seq, o.status, o.available_at FROM ordered_jobs AS o
        WHERE o.key = k.key AND o.status IN ('queued', 'running', 'blocked')
        ORDER BY o.seq LIMIT 1) AS n
    LEFT JOIN unnest(v_cont) AS c(key) ON c.key = k.key
    LEFT JOIN unnest(v_bkeys, v_btos) AS b(key, batch_to)
           ON b.key = k.key AND n.seq <= b.batch_to AND n.status = 'queued'
              AND n.available_at <= statement_timestamp()
    WHERE c.key IS NULL OR n.seq <= ordered_key_next_seq(k.key);

    RETURN QUERY SELECT true, d.id, NULL::text, NULL::bigint, NULL::text, NULL::jsonb,
                        NULL::integer, NULL::integer, d.version, NULL::timestamptz,
                        NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::text
                 FROM unnest(v_done, v_done_versions) AS d(id, version);

    IF v_next IS NULL THEN
        IF v_cont IS NOT NULL THEN
            PERFORM ordered_gaps_sync(v_cont);
        END IF;
        RETURN;
    END IF;
    -- The rest of a batch goes on under its claim: its next job becomes the running head,
    -- leased until the batch's lease ends (as this statement's snapshot has it, or a fresh
    -- lease if that is later), at the version its claim returned, and leads what the batch
    -- still covers. One that changed while this waited for it is left to the head update
    -- below, as any next job.
    IF v_hand IS NOT NULL THEN
        WITH handed AS (
            UPDATE ordered_jobs AS j
            SET head = true,
                status = 'running',
                attempts = j.attempts + 1,
                claim_version = j.claim_version + 1,
                claimed_by = b.claimed_by,
                lease_until = greatest(b.lease_until, clock_timestamp() + p_lease),
                attempted_at = b.attempted_at,
                batch_to = b.batch_to
            FROM unnest(v_bkeys, v_btos, v_bleases, v_battempted, v_bclaimed)
                     AS b(key, batch_to, lease_until, attempted_at, claimed_by)
            WHERE j.id = ANY (v_hand) AND j.key = b.key AND NOT j.head
              AND j.status NOT IN ('running', 'blocked', 'done', 'failed')
            RETURNING j.id
        )
        SELECT array_agg(h.id) INTO v_hand FROM handed AS h;
    END IF;
    v_claim := coalesce(v_claim, '{}');
    IF cardinality(v_claim) > 0 THEN
        IF p_lease IS NULL THEN
            RAISE EXCEPTION 'ordered_jobs_complete: p_lease is required to claim next jobs';
        END IF;
        -- One update makes them heads and does the claim's update (ordered_jobs_claim) too.
        -- The lease starts now, not at the start of the statement: it may have waited for a
        -- key. The conditions are checked again on a row that changed during a wait for it
        -- (another settlement of the key may have claimed or closed it meanwhile); "queued"
        -- is written as what it is not, so that no partial index's predicate follows from it
        -- and only the primary key can serve the update (see the completion's update above).
        RETURN QUERY
        WITH claimed AS (
            UPDATE ordered_jobs AS j
            SET head = true,
                status = 'running',
                attempts = j.attempts + 1,
                claim_version = j.claim_version + 1,
                claimed_by = nullif(current_setting('application_name'), ''),
                lease_until = clock_timestamp() + p_lease,
                attempted_at = clock_timestamp(),
                batch_to = NULL
            WHERE j.id = ANY (v_claim) AND NOT j.head
              AND j.status NOT IN ('running', 'blocked', 'done', 'failed')
            RETURNING j.*
        )
        SELECT false, p.id, p.key, p.seq, p.kind, p.payload, p.attempts, p.max_attempts,
               p.claim_version, p.lease_until, p.created_at, p.available_at, p.attempted_at,
               p.last_error
        FROM claimed AS p;
    END IF;
    -- The next heads not claimed (not due, blocked, or past p_next_limit) become heads only;
    -- never one that an overlapping settlement of its key closed while this waited for it
    -- (open written as not closed, for the reason above).
    v_rest := ARRAY(SELECT unnest(v_next) EXCEPT SELECT unnest(v_claim)
                    EXCEPT SELECT unnest(coalesce(v_hand, '{}')));
    IF cardinality(v_rest) > 0 THEN
        UPDATE ordered_jobs AS j SET head = true
        WHERE j.id = ANY (v_rest) AND NOT j.head AND j.status NOT IN ('done', 'failed');
    END IF;
    IF v_cont IS NOT NULL THEN
        PERFORM ordered_gaps_sync(v_cont);
    END IF;
END
$$;
COMMENT ON FUNCTION ordered_jobs_complete(bigint[], bigint[], integer, interval) IS
'Internal to ordered: completes a batch of claims and claims the keys'' next jobs (workers). Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
