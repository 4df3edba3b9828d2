SELECT count(*), count(*) FILTER (WHERE status = 'done')
    FROM ordered_jobs WHERE key = $1 AND seq > $2
