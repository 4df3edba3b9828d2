SELECT count(*) FROM ordered_jobs AS j WHERE status = 'done'
    AND NOT EXISTS (SELECT 1 FROM demo_effects AS e WHERE e.key = j.key AND e.seq = j.seq)
