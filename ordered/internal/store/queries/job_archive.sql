-- Deletes done jobs in one bounded batch (see ordered_archive in the schema): how many, and
-- whether archival has been round every key since the cursor was at ($4, $5): a round further,
-- at or past that key, in the order its walk compares keys in.
-- $1 older_than  interval  only jobs finished longer ago than this
-- $2 limit       integer   at most this many jobs
-- $3 wait        boolean   wait for another archiver rather than pass
-- $4 rounds      bigint    the cursor's rounds before the first call (null: not asked)
-- $5 after_key   text      the cursor's key before the first call
SELECT a.deleted,
       coalesce(a.rounds > $4::bigint + 1 OR (a.rounds = $4::bigint + 1 AND a.after_key >= $5::text), false)
FROM ordered_archive($1::interval, $2, $3) AS a;
