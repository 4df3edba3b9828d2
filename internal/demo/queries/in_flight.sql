SELECT coalesce(array_agg(id), '{}') FROM ordered_jobs_now WHERE status = 'running'
