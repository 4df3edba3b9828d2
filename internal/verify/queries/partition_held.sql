SELECT clock_timestamp(), coalesce(array_agg(j.key), '{}'), coalesce(array_agg(j.seq), '{}'),
       coalesce(array_agg(j.claim_version), '{}')
FROM ordered_jobs_now AS j
JOIN verify_starts AS s ON s.key = j.key AND s.seq = j.seq AND s.claim_version = j.claim_version
WHERE j.status = 'running' AND s.pid = ANY($1)
