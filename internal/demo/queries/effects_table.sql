CREATE TABLE demo_effects (
    id         bigserial   PRIMARY KEY,
    key        text        NOT NULL,
    seq        bigint      NOT NULL,
    attempt    integer     NOT NULL,
    worker     text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
)
