SELECT key, seq, claim_version, at FROM orderedtest_verify_starts
