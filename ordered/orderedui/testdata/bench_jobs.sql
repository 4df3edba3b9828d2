-- A queue of $1 keys with 10 jobs each, in the states a busy queue has, written directly (a
-- fixture for the dashboard's benchmark, not a way to enqueue): per 100 keys, one blocked at
-- seq 5 with 4 jobs behind it, one with seq 3 failed under the skip policy, three running
-- seq 7 (one of them with an expired lease), 25 queued at seq 7, the rest done. Done jobs
-- finished over the last day. The jobs' rows come first, then their keys' heads
-- (ordered_heads): a running head's claim is in its head row, its job's row stays queued.
WITH j AS (
    SELECT ('cust-' || lpad(k::text, 7, '0')) COLLATE "C" AS key, s,
           (ARRAY['invoice.paid', 'order.created', 'shipment.sent'])[1 + (s % 3)] AS kind,
           jsonb_build_object('customer', k, 'seq', s, 'amount_cents', (k * 7 + s) % 10000,
                              'lines', jsonb_build_array(jsonb_build_object('sku', 'SKU-' || s, 'qty', 1 + s % 3))) AS payload,
           CASE
               WHEN k % 100 = 0 THEN CASE WHEN s < 5 THEN 'done' WHEN s = 5 THEN 'blocked' ELSE 'queued' END
               WHEN k % 100 = 1 THEN CASE WHEN s = 3 THEN 'failed' ELSE 'done' END
               WHEN k % 100 BETWEEN 2 AND 4 THEN CASE WHEN s < 7 THEN 'done' WHEN s = 7 THEN 'running' ELSE 'queued' END
               WHEN k % 100 BETWEEN 5 AND 29 THEN CASE WHEN s < 7 THEN 'done' ELSE 'queued' END
               ELSE 'done'
           END AS st,
           (k % 100 = 0 AND s = 5) OR (k % 100 BETWEEN 2 AND 29 AND s = 7) AS head,
           CASE WHEN k % 100 = 2 AND s = 7 THEN now() - interval '10 seconds'
                WHEN k % 100 IN (3, 4) AND s = 7 THEN now() + interval '30 seconds' END AS lease,
           CASE WHEN (k % 100 = 0 AND s = 5) OR (k % 100 = 1 AND s = 3) THEN 3 ELSE 1 END AS att,
           CASE WHEN (k % 100 = 0 AND s = 5) OR (k % 100 = 1 AND s = 3)
                THEN 'handler: upstream said 503 for customer ' || k END AS err,
           now() - interval '1 day' + (s || ' seconds')::interval AS created,
           now() - (random() * interval '1 day') AS fin
    FROM generate_series(0, $1 - 1) AS k, generate_series(0, 9) AS s
), jobs AS (
    -- a running job's row is queued, without its claim, until it settles
    INSERT INTO ordered_jobs (key, seq, kind, payload, status, available_at, claim_version, attempts,
                              max_attempts, last_error, created_at, attempted_at, finished_at, failed_at)
    SELECT key, s, kind, payload, CASE WHEN st = 'running' THEN 'queued' ELSE st END, created,
           CASE WHEN st IN ('queued', 'running') THEN 0 ELSE att END,
           CASE WHEN st IN ('queued', 'running') THEN 0 ELSE att END,
           25, err, created, CASE WHEN st IN ('queued', 'running') THEN NULL ELSE fin - interval '1 second' END,
           CASE WHEN st IN ('done', 'failed', 'blocked') THEN fin END,
           CASE WHEN st IN ('failed', 'blocked') THEN fin END
    FROM j
    RETURNING id, key, seq
)
INSERT INTO ordered_heads (key, job_id, seq, state, available_at, lease_until, claim_version,
                           attempts, max_attempts, attempted_at, closed_to)
SELECT j.key, jobs.id, j.s, j.st, j.created, j.lease,
       CASE WHEN j.st = 'queued' THEN 0 ELSE j.att END, CASE WHEN j.st = 'queued' THEN 0 ELSE j.att END,
       25, CASE WHEN j.st = 'queued' THEN NULL ELSE j.fin - interval '1 second' END, j.s - 1
FROM j
JOIN jobs ON jobs.key = j.key AND jobs.seq = j.s
WHERE j.head;
