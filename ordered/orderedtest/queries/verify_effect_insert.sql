INSERT INTO orderedtest_verify_effects (key, seq, claim_version) VALUES ($1, $2, $3)
