-- ordered_stats_shared returns the last counts if they are younger than p_max_age, else
-- counts again. One caller counts at a time: one that finds another at it (the row locked)
-- returns the last counts rather than wait or count twice, as does one that cannot write
-- (counted_at null: none yet). The row stays locked until the counting caller's transaction
-- ends, so call it in a transaction of its own, as workers do.
CREATE OR REPLACE FUNCTION ordered_stats_shared(p_max_age interval) RETURNS ordered_stats
LANGUAGE plpgsql
AS $$
DECLARE
    v ordered_stats;
BEGIN
    SELECT * INTO STRICT v FROM ordered_stats;
    IF v.counted_at > clock_timestamp() - p_max_age THEN
        RETURN v;
    END IF;
    BEGIN
        PERFORM 1 FROM ordered_stats FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN v;
        END IF;
        UPDATE ordered_stats AS s
        SET (queued, running, done, failed, blocked, blocked_keys, expired_leases,
             oldest_ready_at, gap_keys, gap_blocked_keys, oldest_gap_at) =
                (SELECT n.queued, n.running, n.done, n.failed, n.blocked, n.blocked_keys,
                        n.expired_leases, n.oldest_ready_at, n.gap_keys, n.gap_blocked_keys,
                        n.oldest_gap_at
                 FROM ordered_stats_now AS n),
            counted_at = clock_timestamp()
        -- one that counted while this caller waited for the lock left young counts
        WHERE s.counted_at IS NULL OR s.counted_at <= clock_timestamp() - p_max_age
        RETURNING * INTO v;
        IF NOT FOUND THEN
            SELECT * INTO STRICT v FROM ordered_stats;
        END IF;
    EXCEPTION
        -- a REPEATABLE READ caller whose snapshot predates another's count; a read-only one
        WHEN serialization_failure OR read_only_sql_transaction THEN
            NULL;
    END;
    RETURN v;
END
$$;
COMMENT ON FUNCTION ordered_stats_shared(interval) IS
'Internal to ordered: the queue''s shared counts (metrics, ordered status). Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
