-- The keys of the benchmark's queue (see bench_jobs.sql): $1 of them, cust-0000000 on.
INSERT INTO ordered_keys (key, seq_max)
SELECT 'cust-' || lpad(k::text, 7, '0'), 9 FROM generate_series(0, $1 - 1) AS k;
