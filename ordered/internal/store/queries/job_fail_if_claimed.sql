-- Fails a job for good. false: the claim did not qualify, nothing changed.
-- $1 id       bigint   the job
-- $2 version  bigint   its claim version
-- $3 error    text     the error to record
-- $4 block    boolean  keep the key blocked (policy Block) instead of moving on
-- $5 expired  boolean  the claim's lease must have expired with no attempts left (else be live)
SELECT ordered_job_fail($1, $2, $3, $4, $5);
