INSERT INTO verify_effects (key, seq, claim_version, batch)
SELECT $1, $2, $3, $5 WHERE EXISTS (
    SELECT 1 FROM ordered_jobs WHERE id = $4 AND claim_version = $3 AND status = 'running'
      AND lease_until > clock_timestamp())
