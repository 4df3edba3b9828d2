-- Queue gauges counted once per interval for all workers. Counting jobs by status reads the
-- whole table, and every worker did it on every maintenance pass: ten workers read a
-- million-job table ten times per interval. Now the first worker whose pass finds the shared
-- counts older than its interval counts again, and the others read them.

-- The queue's counts as of now (ordered status reads this directly).
CREATE VIEW ordered_stats_now AS
SELECT
    count(*) FILTER (WHERE status = 'queued')                    AS queued,
    count(*) FILTER (WHERE status = 'running')                   AS running,
    count(*) FILTER (WHERE status = 'done')                      AS done,
    count(*) FILTER (WHERE status IN ('failed', 'blocked'))      AS failed,
    count(*) FILTER (WHERE status = 'blocked')                   AS blocked_keys,
    count(*) FILTER (WHERE status = 'running'
                       AND lease_until <= statement_timestamp()) AS expired_leases,
    min(available_at) FILTER (WHERE head AND status = 'queued'
                                AND available_at <= statement_timestamp()) AS oldest_ready_at
FROM ordered_jobs;

-- The last counts, one row, and when they were taken.
CREATE TABLE ordered_stats (
    one             boolean     PRIMARY KEY DEFAULT true CHECK (one),
    queued          bigint      NOT NULL DEFAULT 0,
    running         bigint      NOT NULL DEFAULT 0,
    done            bigint      NOT NULL DEFAULT 0,
    failed          bigint      NOT NULL DEFAULT 0,
    blocked_keys    bigint      NOT NULL DEFAULT 0,
    expired_leases  bigint      NOT NULL DEFAULT 0,
    oldest_ready_at timestamptz,
    counted_at      timestamptz -- null: never counted
);
INSERT INTO ordered_stats DEFAULT VALUES;

-- ordered_stats_shared returns the last counts if they are younger than p_max_age, else
-- counts again. One caller counts at a time: one that finds another at it (the row locked)
-- returns the last counts rather than wait or count twice, as does one that cannot write
-- (counted_at null: none yet). The row stays locked until the counting caller's transaction
-- ends, so call it in a transaction of its own, as workers do.
CREATE FUNCTION ordered_stats_shared(p_max_age interval) RETURNS ordered_stats
LANGUAGE plpgsql AS $$
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
        SET (queued, running, done, failed, blocked_keys, expired_leases, oldest_ready_at) =
                (SELECT n.queued, n.running, n.done, n.failed, n.blocked_keys, n.expired_leases,
                        n.oldest_ready_at
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
