INSERT INTO report_requests (customer, seq, kind, request_key)
VALUES ($1, $2, $3, $4)
RETURNING id
