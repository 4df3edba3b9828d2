SELECT coalesce(sum(attempts - 1) FILTER (WHERE attempts > 1), 0),
    count(*) FILTER (WHERE attempts > 0) FROM ordered_jobs_now
