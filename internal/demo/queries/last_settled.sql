SELECT max(finished_at) FROM ordered_jobs WHERE id = ANY($1)
