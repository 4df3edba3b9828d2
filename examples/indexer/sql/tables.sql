-- The indexer's own tables, in the same schema as the queue.

-- Processes starting at once create the tables one after the other (the whole file runs as one
-- transaction).
SELECT pg_advisory_xact_lock(hashtext('indexer.tables'));

-- What the indexer found: an event in every block whose number ends in 007. Written with
-- ON CONFLICT DO NOTHING, so indexing a range again changes nothing here.
CREATE TABLE IF NOT EXISTS block_events (
    block      bigint PRIMARY KEY,
    range_from bigint NOT NULL
);

-- One row per committed indexing of a range, with the claim that did it. No unique key on
-- purpose: a range indexed twice, or a stale worker's effect that committed, would show here.
CREATE TABLE IF NOT EXISTS index_runs (
    range_from    bigint      NOT NULL,
    range_to      bigint      NOT NULL,
    events        bigint      NOT NULL,
    worker        text        NOT NULL,
    attempt       integer     NOT NULL,
    claim_version bigint      NOT NULL,
    indexed_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS index_runs_range_from ON index_runs (range_from);
