SELECT count(*), count(*) FILTER (WHERE status = 'done')
    FROM ordered_jobs_now WHERE key = $1 AND seq > $2
