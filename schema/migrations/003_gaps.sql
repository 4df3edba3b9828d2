-- Gaps of contiguous keys (see 002 and docs/design.md, "Contiguous keys and gaps").
--
-- A contiguous key's next seq is greatest(next_seq, archived_seq + 1, its highest finished
-- seq + 1) (ordered_key_next_seq): every seq below it has finished or was passed as a gap, so
-- an event below it that is not stored is late. Its head is its lowest open job only when
-- that job's seq is at most the next seq; a key with open jobs and no head waits on a gap,
-- the seqs from its next seq to its lowest open job's. Passing a gap moves next_seq past it.

-- What a gap that stays open does: wait (forever), or once it has been open for gap_timeout,
-- proceed past it or block the key for an operator. Fixed when the key row is created.
ALTER TABLE ordered_keys
    ADD COLUMN gap_action text CHECK (gap_action IN ('wait', 'proceed', 'block')),
    ADD COLUMN gap_timeout interval CHECK (gap_timeout > interval '0'),
    ADD CONSTRAINT ordered_keys_gap_policy CHECK (
        (next_seq IS NULL AND gap_action IS NULL AND gap_timeout IS NULL)
        OR (next_seq IS NOT NULL AND (gap_action = 'wait') = (gap_timeout IS NULL)));

-- One row per contiguous key that waits on a gap now: since when, when its gap policy acts
-- (null: never), and whether it blocked the key for an operator. Written with the key row
-- locked, by whoever moves the key's head (ordered_gaps_sync); the claim never reads it.
CREATE TABLE ordered_gaps (
    key        text        PRIMARY KEY,
    since      timestamptz NOT NULL,
    deadline   timestamptz,
    blocked_at timestamptz
);
-- Maintenance reads the gaps due for their policy, oldest deadline first.
CREATE INDEX ordered_gaps_due ON ordered_gaps (deadline) WHERE blocked_at IS NULL;

-- The gaps that were passed: by their timeout or by an operator (Client.ReleaseGap). A seq in
-- one is late. Kept for inspection (ordered gaps, a key's timeline); nothing reads it to order.
CREATE TABLE ordered_gaps_passed (
    key       text        NOT NULL,
    from_seq  bigint      NOT NULL,
    to_seq    bigint      NOT NULL CHECK (to_seq >= from_seq),
    passed_at timestamptz NOT NULL DEFAULT now(),
    reason    text        NOT NULL CHECK (reason IN ('timeout', 'released')),
    PRIMARY KEY (key, from_seq)
);

-- The counts gain the keys waiting on a gap, those of them blocked, and the oldest gap.
CREATE OR REPLACE VIEW ordered_stats_now AS
SELECT
    count(*) FILTER (WHERE status = 'queued')                    AS queued,
    count(*) FILTER (WHERE status = 'running')                   AS running,
    count(*) FILTER (WHERE status = 'done')                      AS done,
    count(*) FILTER (WHERE status = 'failed')                    AS failed,
    count(*) FILTER (WHERE status = 'blocked')                   AS blocked,
    count(DISTINCT key) FILTER (WHERE status = 'blocked')        AS blocked_keys,
    count(*) FILTER (WHERE status = 'running'
                       AND lease_until <= statement_timestamp()) AS expired_leases,
    min(available_at) FILTER (WHERE head AND status = 'queued'
                                AND available_at <= statement_timestamp()) AS oldest_ready_at,
    (SELECT count(*) FROM ordered_gaps)                          AS gap_keys,
    (SELECT count(*) FROM ordered_gaps WHERE blocked_at IS NOT NULL) AS gap_blocked_keys,
    (SELECT min(since) FROM ordered_gaps)                        AS oldest_gap_at
FROM ordered_jobs;

ALTER TABLE ordered_stats
    ADD COLUMN gap_keys bigint NOT NULL DEFAULT 0,
    ADD COLUMN gap_blocked_keys bigint NOT NULL DEFAULT 0,
    ADD COLUMN oldest_gap_at timestamptz;

-- The enqueue functions gain the parameters of contiguous keys: their old signatures go.
DROP FUNCTION IF EXISTS ordered_enqueue(jsonb, integer, integer, integer);
DROP FUNCTION IF EXISTS ordered_enqueue_events(ordered_event[], integer, integer, integer);
