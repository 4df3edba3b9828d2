SELECT id FROM report_requests WHERE request_key = $1
