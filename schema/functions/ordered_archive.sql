-- ordered_archive deletes up to p_limit done jobs finished more than p_older_than ago and
-- records in their keys the highest seq archived, so an event at or below it is still
-- recognised. It returns how many jobs it deleted.
--
-- It walks the keys in key order, a thousand keys a step, and stops once it has deleted
-- p_limit jobs or visited p_max_keys keys (at the end of a step). Of each key it deletes the old
-- done jobs of its finished history (below its head, or all of it for a key with no open job)
-- in seq order, up to the first done job that is not old enough (a key's jobs finish in seq
-- order), reading at most p_limit of its done jobs. Failed jobs are kept and passed over,
-- however many there are. Key rows are locked in key order, as enqueue locks them, skipping
-- those another transaction holds (an enqueue, a completion, an operator's action: the next
-- walk takes them), so archivers and enqueuers never deadlock.
--
-- Without p_from (a worker's maintenance), it goes on from where the last such call stopped
-- (ordered_archive_cursor), round to where it began. With p_from (ordered archive), it walks
-- from the key after p_from to the end of the keys, the cursor left as it is, and returns in
-- goes_on_after the p_from of the next call: null once it reached the end, the first key of
-- the step it stopped in when p_limit stopped it (that step may have more to archive). A walk's
-- calls pass the before of its first (p_before; null: the statement's start), so that they
-- archive the jobs finished p_older_than before one time, and the walk ends however fast jobs
-- finish meanwhile. One archiver works at a time, the one holding the cursor's row: another
-- returns at once, or with p_wait waits for it. Its plans are pinned to index scans: a queue
-- table's statistics lag behind its churn.
CREATE OR REPLACE FUNCTION ordered_archive(p_older_than interval, p_limit integer,
                                           p_wait boolean DEFAULT false,
                                           p_from text DEFAULT NULL,
                                           p_before timestamptz DEFAULT NULL,
                                           p_max_keys integer DEFAULT 100000,
                                           OUT deleted integer, OUT goes_on_after text,
                                           OUT before timestamptz)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
AS $$
DECLARE
    v_start text;
    v_after text;
    v_step_after text; -- where the current step began
    v_upper text;      -- the walk's last key (null: to the end of the keys)
    v_wrapped boolean := false;
    v_keys text[];
    v_n integer := 0;
    v_visited integer := 0;
    v_deleted integer;
    v_cutoff timestamptz;
BEGIN
    deleted := 0;
    before := coalesce(p_before, statement_timestamp());
    v_cutoff := before - p_older_than;
    IF p_wait THEN
        SELECT a.after_key INTO v_start FROM ordered_archive_cursor AS a FOR UPDATE;
    ELSE
        SELECT a.after_key INTO v_start FROM ordered_archive_cursor AS a FOR UPDATE SKIP LOCKED;
    END IF;
    IF NOT FOUND AND p_wait THEN
        RAISE EXCEPTION 'ordered: the archive cursor has lost its row (INSERT INTO ordered_archive_cursor DEFAULT VALUES restores it)';
    ELSIF NOT FOUND THEN
        goes_on_after := p_from;
        RETURN;
    END IF;
    -- A walk from p_from ends at the end of the keys, as one past its wrap does.
    v_start := coalesce(p_from, v_start);
    v_after := v_start;
    v_wrapped := p_from IS NOT NULL;
    LOOP
        v_step_after := v_after;
        SELECT array_agg(k.key) INTO v_keys FROM (
            SELECT k.key FROM ordered_keys AS k
            WHERE k.key > v_after AND (v_upper IS NULL OR k.key <= v_upper)
            ORDER BY k.key
            LIMIT 1000) AS k;
        IF v_keys IS NULL THEN
            EXIT WHEN v_wrapped OR v_start = '';
            v_wrapped := true;
            v_after := '';
            v_upper := v_start;
            CONTINUE;
        END IF;
        v_visited := v_visited + cardinality(v_keys);
        v_after := v_keys[cardinality(v_keys)];

        WITH locked AS (
            SELECT k.key, k.archived_seq,
                   CASE WHEN h.key IS NOT NULL THEN h.closed_to
                        WHEN k.next_seq IS NOT NULL THEN greatest(k.next_seq, k.archived_seq + 1) - 1
                   END AS closed_to
            FROM ordered_keys AS k
            LEFT JOIN LATERAL (SELECT h.key, h.closed_to FROM ordered_heads AS h
                               WHERE h.key = k.key OFFSET 0) AS h ON true
            WHERE k.key = ANY (v_keys)
            ORDER BY k.key
            FOR NO KEY UPDATE OF k SKIP LOCKED
        ), old AS (
            SELECT j.id FROM locked AS l
            CROSS JOIN LATERAL (
                SELECT p.id FROM (
                    SELECT o.id, bool_and(o.finished_at < v_cutoff) OVER (ORDER BY o.seq) AS old
                    FROM ordered_jobs AS o
                    WHERE o.key = l.key AND o.seq > l.archived_seq AND o.status = 'done'
                      AND (l.closed_to IS NULL OR o.seq <= l.closed_to)
                    ORDER BY o.seq
                    LIMIT p_limit) AS p
                WHERE p.old) AS j
            LIMIT p_limit - v_n
        ), deleted AS (
            DELETE FROM ordered_jobs AS j WHERE j.id IN (SELECT o.id FROM old AS o)
            RETURNING j.key, j.seq
        ), marked AS (
            UPDATE ordered_keys AS k
            SET archived_seq = greatest(k.archived_seq, d.seq)
            FROM (SELECT d.key, max(d.seq) AS seq FROM deleted AS d GROUP BY d.key) AS d
            WHERE k.key = d.key
        )
        SELECT count(*) INTO v_deleted FROM deleted;
        v_n := v_n + v_deleted;
        EXIT WHEN v_n >= p_limit OR v_visited >= p_max_keys;
    END LOOP;
    deleted := v_n;
    IF p_from IS NOT NULL THEN
        goes_on_after := CASE WHEN v_n >= p_limit THEN v_step_after
                              WHEN v_visited >= p_max_keys THEN v_after END;
        RETURN;
    END IF;
    UPDATE ordered_archive_cursor SET after_key = CASE WHEN v_n >= p_limit OR v_visited >= p_max_keys
                                                       THEN v_after ELSE v_start END;
END
$$;
COMMENT ON FUNCTION ordered_archive(interval, integer, boolean, text, timestamptz, integer) IS
'Internal to ordered: deletes old done jobs in bounded batches (ordered archive, a worker''s maintenance). Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
