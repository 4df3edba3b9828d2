SELECT key, seq, claim_version, at FROM verify_starts
