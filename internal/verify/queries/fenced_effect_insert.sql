-- Applies an effect only while the claim ($4 the job, $3 its claim version) is current: the
-- job is running at that version with a live lease, or it is a later job of a batch, still
-- queued one version below, that a running head with a live lease covers (ordered_jobs_extend).
INSERT INTO verify_effects (key, seq, claim_version, batch)
SELECT $1, $2, $3, $5 WHERE EXISTS (
    SELECT 1 FROM ordered_jobs AS j
    JOIN ordered_heads AS h ON h.key = j.key
    WHERE j.id = $4 AND h.state = 'running' AND h.lease_until > clock_timestamp()
      AND ((h.job_id = j.id AND h.claim_version = $3)
           OR (j.claim_version = $3 - 1 AND j.status = 'queued' AND h.seq < j.seq AND j.seq <= h.batch_to)))
