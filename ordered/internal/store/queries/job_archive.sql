-- Deletes up to $2 done jobs finished more than $1 ago, oldest first, and records in their keys
-- the highest seq archived, so an event at or below it is still recognised as late. Rows locked
-- by another archiver are skipped: several processes can archive at once without double work.
WITH doomed AS (
    SELECT id
    FROM ordered_jobs
    WHERE status = 'done' AND finished_at < statement_timestamp() - $1::interval
    ORDER BY finished_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM ordered_jobs AS j
    USING doomed
    WHERE j.id = doomed.id
    RETURNING j.key, j.seq
), marked AS (
    UPDATE ordered_keys AS k
    SET archived_seq = greatest(k.archived_seq, d.seq)
    FROM (SELECT key, max(seq) AS seq FROM deleted GROUP BY key) AS d
    WHERE k.key = d.key
)
SELECT count(*) FROM deleted;
