SELECT key, seq, claim_version, id FROM verify_effects
