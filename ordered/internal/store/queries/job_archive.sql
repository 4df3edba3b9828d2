-- Deletes done jobs in one bounded batch (see ordered_archive in the schema): how many, for a
-- walk from $4 the $4 of the walk's next call (null: it reached the end of the keys), and the
-- time the call took its cutoff from, for the walk's next calls' $5.
-- $1 older_than  interval     only jobs finished longer ago than this
-- $2 limit       integer      at most this many jobs
-- $3 wait        boolean      wait for another archiver rather than pass
-- $4 from        text         walk from the key after this one to the end (null: from the
--                             workers' shared cursor, round the keys)
-- $5 before      timestamptz  take the cutoff from this time (null: the statement's start)
SELECT deleted, goes_on_after, before FROM ordered_archive($1::interval, $2, $3, $4::text, $5::timestamptz);
