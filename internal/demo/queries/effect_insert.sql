INSERT INTO demo_effects (key, seq, attempt, worker) VALUES ($1, $2, $3, $4)
