SELECT key, seq FROM demo_effects ORDER BY id
