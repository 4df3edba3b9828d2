-- The customer's next request seq; the row stays locked until the request's transaction ends.
INSERT INTO report_customers (customer, last_seq)
VALUES ($1, 1)
ON CONFLICT (customer) DO UPDATE SET last_seq = report_customers.last_seq + 1
RETURNING last_seq
