-- Queued jobs, for admission control.
SELECT count(*) FROM ordered_jobs WHERE status = 'queued';
