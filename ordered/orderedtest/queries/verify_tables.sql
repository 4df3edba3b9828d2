CREATE TABLE orderedtest_verify_starts (
    id            bigserial   PRIMARY KEY,
    key           text        NOT NULL,
    seq           bigint      NOT NULL,
    claim_version bigint      NOT NULL,
    at            timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE orderedtest_verify_effects (
    id            bigserial   PRIMARY KEY,
    key           text        NOT NULL,
    seq           bigint      NOT NULL,
    claim_version bigint      NOT NULL
)
