SELECT id, customer, seq, kind, status, coalesce(result, ''), created_at, done_at
FROM report_requests
WHERE id = $1
