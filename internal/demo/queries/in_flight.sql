SELECT coalesce(array_agg(id), '{}') FROM ordered_jobs WHERE status = 'running'
