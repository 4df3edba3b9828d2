-- Deletes done jobs in one bounded batch (see ordered_archive in the schema) and returns how many.
-- $1 older_than  interval  only jobs finished longer ago than this
-- $2 limit       integer   at most this many jobs
SELECT ordered_archive($1::interval, $2);
