SELECT key, seq, claim_version, at, batch FROM verify_starts
