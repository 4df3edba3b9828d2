-- The service's own tables, in the same schema as the queue.

-- Processes starting at once create the tables one after the other (the whole file runs as one
-- transaction).
SELECT pg_advisory_xact_lock(hashtext('reports.tables'));
CREATE TABLE IF NOT EXISTS report_customers (
    customer text   PRIMARY KEY,
    -- The seq of the customer's latest request. Taking the next one locks this row until the
    -- request commits, so a customer's requests get their seqs in commit order.
    last_seq bigint NOT NULL
);

CREATE TABLE IF NOT EXISTS report_requests (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer     text        NOT NULL,
    seq          bigint      NOT NULL,
    kind         text        NOT NULL,
    -- The client's Idempotency-Key header, when it sent one: a retried POST finds its request.
    request_key  text        UNIQUE,
    status       text        NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'done')),
    result       text,
    -- When the report was generated, as a position among all reports.
    generated_no bigint,
    created_at   timestamptz NOT NULL DEFAULT now(),
    done_at      timestamptz,
    UNIQUE (customer, seq)
);

CREATE SEQUENCE IF NOT EXISTS report_generation;
