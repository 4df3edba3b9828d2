-- A page of failed jobs (failed and blocked) in (key, seq) order after ($4, $5), read through
-- ordered_jobs_failed, so a page costs its own rows and the failed rows it filters out, never
-- an OFFSET's walk. The key range starts at the prefix (a string sorts at or before its
-- extensions in every collation); starts_with filters it.
-- $1 prefix     text     keys starting with this ('' : all)
-- $2 kind       text     only this kind (null: all)
-- $3 error      text     last_error containing this, ignoring case (null: all)
-- $4 after_key  text     resume after this (key, seq) (null: from the start)
-- $5 after_seq  bigint   with after_key
-- $6 blocking   boolean  only jobs that hold their key (true), only those that don't (false), all (null)
-- $7 limit      integer  at most this many
SELECT id, key, seq, kind, payload, status, attempts, max_attempts, last_error,
       created_at, finished_at
FROM ordered_jobs
WHERE failed_at IS NOT NULL AND status IN ('failed', 'blocked')
  AND key >= $1 AND starts_with(key, $1)
  AND ($4::text IS NULL OR (key, seq) > ($4, $5::bigint))
  AND ($2::text IS NULL OR kind = $2)
  AND ($3::text IS NULL OR strpos(lower(last_error), lower($3)) > 0)
  AND ($6::boolean IS NULL OR (status = 'blocked') = $6)
ORDER BY key, seq
LIMIT $7;
