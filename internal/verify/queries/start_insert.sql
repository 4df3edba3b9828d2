INSERT INTO verify_starts (key, seq, claim_version, pid, batch) VALUES ($1, $2, $3, $4, $5)
