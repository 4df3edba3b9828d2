CREATE TABLE verify_starts (
    id            bigserial   PRIMARY KEY,
    key           text        NOT NULL,
    seq           bigint      NOT NULL,
    claim_version bigint      NOT NULL,
    pid           integer     NOT NULL,
    at            timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE verify_effects (
    id            bigserial   PRIMARY KEY,
    key           text        NOT NULL,
    seq           bigint      NOT NULL,
    claim_version bigint      NOT NULL
)
