SELECT key, seq, claim_version, id, batch FROM verify_effects
