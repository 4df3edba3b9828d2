-- What became of a completion batch whose answer was lost ($1 ids, $2 their claim versions,
-- $3 their keys, same positions), in the rows of job_complete_many.sql: if it committed, the
-- jobs it completed (completed true) and the next jobs it claimed that are still its own,
-- leased again for $4 from now; no rows if it did not commit, or completed nothing. A next job
-- it took back from an expired lease is not told apart (recovered is false).
--
-- A row keeps the transaction that wrote it as its xmin: a job the batch completed (done, at
-- the version the batch held) for good, the head row of a next job it claimed until a
-- renewal, a release or another claim writes it again. A claim of the batch still running, its lease live, means
-- the batch did not commit (it would have completed it; a lease is only ever renewed while
-- live): then a job done at the batch's version was completed by another statement, and
-- nothing is answered. Of several transactions that completed claims of the batch (the same
-- claim completed twice, say by a handler and then its worker), the batch's is the youngest:
-- the others committed before it was sent (one that committed while the batch waited for a
-- key would be taken for the batch: then the batch's claims look lost, and its next jobs wait
-- out their leases). A next job is taken over only with its lease
-- live, in this statement, so a claim of it after an expiry can neither come before nor be
-- overtaken. It locks the keys' rows first, in key order, as a completion does: a transaction
-- that holds a key (an enqueue, a replay) and then a job of it, as a REPEATABLE READ enqueue
-- locks its keys' heads, is waited for, and the jobs are taken over once it ends. Like a
-- completion, it can deadlock with a transaction that enqueues to several keys out of key
-- order; the client asks again. It reads from a snapshot taken before any such wait: a batch
-- still running on the server (its connection was cut while it waited for a key) that
-- commits meanwhile is not seen, and its next jobs wait out their leases.
-- $1 ids       bigint[]  the batch's jobs
-- $2 versions  bigint[]  their claim versions, same positions
-- $3 keys      text[]    their keys, same positions
-- $4 lease     interval  the next jobs' leases, from now
WITH keys AS (
    SELECT k.key
    FROM ordered_keys AS k
    WHERE k.key = ANY ($3::text[])
    ORDER BY k.key
    FOR SHARE
), batch AS (
    SELECT j.xmin AS xid
    FROM unnest($1::bigint[], $2::bigint[]) AS c(id, version)
    JOIN ordered_jobs AS j ON j.id = c.id
    WHERE j.status = 'done' AND j.claim_version = c.version
      AND NOT EXISTS (
          SELECT 1
          FROM unnest($1::bigint[], $2::bigint[]) AS r(id, version)
          JOIN ordered_jobs AS o ON o.id = r.id
          JOIN ordered_heads AS h ON h.key = o.key
          WHERE h.job_id = r.id AND h.claim_version = r.version
            AND h.lease_until > clock_timestamp())
    ORDER BY age(j.xmin)
    LIMIT 1
), next AS (
    -- The key rows are locked (the subquery runs once, before any head row is read). A next
    -- job is taken over alone: the later jobs of a batch it leads were not written, so they
    -- are not known here, and stay queued behind it. Only plain workers ask for next jobs
    -- ($3 set); a batch worker's batches go on under their own claims.
    UPDATE ordered_heads AS h
    SET lease_until = ordered_lease_end(clock_timestamp(), $4::interval), batch_to = NULL
    FROM batch
    WHERE (SELECT count(*) FROM keys) >= 0
      AND h.key = ANY ($3::text[]) AND h.xmin = batch.xid
      AND h.lease_until > clock_timestamp()
    RETURNING h.*
)
SELECT true AS completed, j.id, NULL::text AS key, NULL::bigint AS seq, NULL::text AS kind,
       NULL::jsonb AS payload, NULL::integer AS attempts, NULL::integer AS max_attempts,
       j.claim_version, NULL::timestamptz AS lease_until, NULL::timestamptz AS created_at,
       NULL::timestamptz AS available_at, NULL::timestamptz AS attempted_at,
       NULL::text AS last_error, false AS recovered
FROM batch
JOIN ordered_jobs AS j ON j.id = ANY ($1::bigint[]) AND j.status = 'done' AND j.xmin = batch.xid
UNION ALL
SELECT false, n.job_id, n.key, n.seq, j.kind, j.payload, n.attempts, n.max_attempts,
       n.claim_version, n.lease_until, j.created_at, n.available_at, n.attempted_at,
       j.last_error, false
FROM next AS n
JOIN ordered_jobs AS j ON j.id = n.job_id;
