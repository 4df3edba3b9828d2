INSERT INTO verify_effects (key, seq, claim_version) VALUES ($1, $2, $3)
