CREATE TABLE verify_starts (
    id            bigserial   PRIMARY KEY,
    key           text        NOT NULL,
    seq           bigint      NOT NULL,
    claim_version bigint      NOT NULL,
    pid           integer     NOT NULL,
    -- the batch claim the attempt ran under ("id/claim_version" of its first job), if any
    batch         text        NOT NULL DEFAULT '',
    at            timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE verify_effects (
    id            bigserial   PRIMARY KEY,
    key           text        NOT NULL,
    seq           bigint      NOT NULL,
    claim_version bigint      NOT NULL,
    -- the batch claim the effect was applied under, as in verify_starts
    batch         text        NOT NULL DEFAULT ''
)
