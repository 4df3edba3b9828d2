-- Whether the queue already holds every one of the events ($1 keys, $2 seqs): as a job, open or
-- finished, or at or below its key's archived history. Enqueuing them writes no job (each is a
-- duplicate, an archived one, or a conflicting one refused), so admission lets them through a
-- full backlog.
SELECT NOT EXISTS (
    SELECT 1
    FROM unnest($1::text[], $2::bigint[]) AS e(key, seq)
    WHERE NOT EXISTS (SELECT 1 FROM ordered_jobs AS j WHERE j.key = e.key AND j.seq = e.seq)
      AND NOT EXISTS (SELECT 1 FROM ordered_keys AS k WHERE k.key = e.key AND e.seq <= k.archived_seq)
)
