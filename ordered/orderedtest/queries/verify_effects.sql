SELECT key, seq, claim_version, id FROM orderedtest_verify_effects
