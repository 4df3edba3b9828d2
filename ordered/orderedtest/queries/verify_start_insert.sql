INSERT INTO orderedtest_verify_starts (key, seq, claim_version) VALUES ($1, $2, $3)
