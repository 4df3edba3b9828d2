SELECT key, seq, status, finished_at FROM ordered_jobs_now
