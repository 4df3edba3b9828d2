-- ordered_heads_refresh makes each given key's head row hold its lowest open job, after its
-- caller added, closed or reopened jobs of the key; a key with no open job, or a contiguous
-- key whose lowest open job is above its next seq (it waits on a gap, which ordered_gaps_sync
-- records), has no head row. Callers hold the key rows locked.
--
-- The lowest open job is looked for from p_from_seq when the caller knows where its keys' open
-- jobs begin (it closed the head below it, or opened a job there again: a replay), else above
-- the head's closed_to (below it every job has finished), or, for a key without a head, below
-- its next seq (a contiguous key) or above its highest finished job. A head that another job goes
-- below is demoted, its claim's count and version kept in its job row, unless it is running:
-- then the caller's change would run a job out of order, and ORD01 rolls it back. With
-- p_started_late (an enqueue) a head that has started before (attempted_at, a retry or a
-- release after a run) is not demoted either: the event that would go below it is late.
-- Claims do not wait for the key row, so the head row is changed only if it is still what
-- this read (PostgreSQL checks the conditions again on a row that changed meanwhile).
CREATE OR REPLACE FUNCTION ordered_heads_refresh(p_keys text[], p_from_seq bigint DEFAULT NULL,
                                                 p_started_late boolean DEFAULT false,
                                                 p_closed_above bigint DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
SET enable_bitmapscan = off
AS $$
DECLARE
    r record;
    v_cont text[];
BEGIN
    FOR r IN
        SELECT k.key, k.next_seq IS NOT NULL AS contiguous, n.next_seq,
               h.job_id AS head_id, h.seq AS head_seq, h.state AS head_state,
               h.attempted_at AS head_attempted, h.closed_above,
               hj.status AS head_status,
               l.id, l.seq, l.status, l.crash_lease_until
        FROM unnest(p_keys) AS p(key)
        JOIN ordered_keys AS k ON k.key = p.key
        CROSS JOIN LATERAL (SELECT CASE WHEN k.next_seq IS NOT NULL
                                        THEN greatest(k.next_seq, k.archived_seq + 1) END AS next_seq) AS n
        LEFT JOIN LATERAL (SELECT h.* FROM ordered_heads AS h WHERE h.key = k.key OFFSET 0) AS h ON true
        LEFT JOIN LATERAL (SELECT j.status FROM ordered_jobs AS j WHERE j.id = h.job_id OFFSET 0) AS hj ON true
        -- where the open jobs begin: above the head's closed_to, or the highest finished job
        CROSS JOIN LATERAL (
            SELECT CASE WHEN h.key IS NOT NULL THEN least(h.closed_to, p_from_seq - 1)
                        WHEN p_from_seq IS NOT NULL THEN p_from_seq - 1
                        -- below a contiguous key's next seq every job has finished or was passed
                        WHEN n.next_seq IS NOT NULL THEN n.next_seq - 1
                        ELSE coalesce((SELECT c.seq FROM ordered_jobs AS c
                                       WHERE c.key = k.key AND c.status IN ('done', 'failed')
                                       ORDER BY c.seq DESC LIMIT 1), -1) END AS bound) AS b
        LEFT JOIN LATERAL (
            SELECT o.id, o.seq, o.status, o.crash_lease_until FROM ordered_jobs AS o
            WHERE o.key = k.key AND o.seq > b.bound AND o.status IN ('queued', 'blocked')
            ORDER BY o.seq LIMIT 1) AS l ON true
        ORDER BY k.key
    LOOP
        IF r.contiguous THEN
            v_cont := v_cont || r.key;
            IF r.seq > r.next_seq THEN
                r.id := NULL; -- it waits on a gap
            END IF;
        END IF;
        CONTINUE WHEN r.id IS NOT DISTINCT FROM r.head_id;

        IF r.head_id IS NOT NULL AND r.head_status IN ('queued', 'blocked')
           AND (r.id IS NULL OR r.seq < r.head_seq) THEN
            -- An open head that a lower job goes below (or a gap: a contiguous key's head never
            -- sits above one) is demoted, if it may be.
            IF r.head_state = 'running' OR (p_started_late AND r.head_attempted IS NOT NULL) THEN
                RAISE EXCEPTION 'ordered: late event: key % seq % is below seq % that has already started',
                    r.key, r.seq, r.head_seq
                    USING ERRCODE = 'ORD01',
                          DETAIL = json_build_object('key', r.key, 'seq', r.seq, 'later_seq', r.head_seq)::text;
            END IF;
            WITH demoted AS (
                DELETE FROM ordered_heads AS h
                WHERE h.key = r.key AND h.job_id = r.head_id AND h.state <> 'running'
                  AND (NOT p_started_late OR h.attempted_at IS NULL)
                RETURNING h.*
            )
            UPDATE ordered_jobs AS j
            SET attempts = d.attempts, claim_version = d.claim_version, attempted_at = d.attempted_at,
                claimed_by = d.claimed_by, available_at = d.available_at
            FROM demoted AS d
            WHERE j.id = d.job_id;
            IF NOT FOUND THEN
                -- claimed (and maybe given back after a start) since it was read
                RAISE EXCEPTION 'ordered: late event: key % seq % is below seq % that has already started',
                    r.key, r.seq, r.head_seq
                    USING ERRCODE = 'ORD01',
                          DETAIL = json_build_object('key', r.key, 'seq', r.seq, 'later_seq', r.head_seq)::text;
            END IF;
        ELSIF r.head_id IS NOT NULL THEN
            -- The head's job was closed by the caller.
            DELETE FROM ordered_heads AS h WHERE h.key = r.key AND h.job_id = r.head_id AND h.state <> 'running';
        END IF;
        CONTINUE WHEN r.id IS NULL;

        INSERT INTO ordered_heads (key, job_id, seq, state, available_at, lease_until, claim_version,
                                   attempts, max_attempts, attempted_at, claimed_by, closed_to, closed_above)
        SELECT j.key, j.id, j.seq,
               CASE WHEN j.crash_lease_until IS NOT NULL THEN 'running'
                    WHEN j.status = 'blocked' THEN 'blocked' ELSE 'queued' END,
               j.available_at, j.crash_lease_until, j.claim_version, j.attempts, j.max_attempts,
               j.attempted_at, j.claimed_by,
               coalesce((SELECT c.seq FROM ordered_jobs AS c WHERE c.key = j.key AND c.seq < j.seq
                         ORDER BY c.seq DESC LIMIT 1), -1),
               CASE WHEN greatest(r.closed_above, p_closed_above) > j.seq
                    THEN greatest(r.closed_above, p_closed_above) END
        FROM ordered_jobs AS j
        WHERE j.id = r.id;
        IF r.crash_lease_until IS NOT NULL THEN
            UPDATE ordered_jobs SET crash_lease_until = NULL WHERE id = r.id;
        END IF;
    END LOOP;

    IF v_cont IS NOT NULL THEN
        PERFORM ordered_gaps_sync(v_cont);
    END IF;
END
$$;
COMMENT ON FUNCTION ordered_heads_refresh(text[], bigint, boolean, bigint) IS
'Internal to ordered: recomputes the head of keys whose rows the caller holds locked. Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
