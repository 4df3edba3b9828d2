-- The CHECK constraints of the two rows that every enqueue writes, the job and its key row,
-- go. PostgreSQL prepares a table's CHECK expressions again for every statement that writes
-- it, and for a single enqueue (one key row update and one job insert) that was about a
-- quarter of the server's time. What they stated still holds: the functions are the only
-- writers of these tables; they check every event by the Go client's rules (ordered_event_problem)
-- and a contiguous key's gap policy before they write, and write status and lease together.
-- The same rules are checked from outside by internal/invariant: after every test of package
-- ordered and after each chaos run (ordered verify).
ALTER TABLE ordered_jobs
    DROP CONSTRAINT ordered_jobs_key_check,
    DROP CONSTRAINT ordered_jobs_seq_check,
    DROP CONSTRAINT ordered_jobs_status_check,
    DROP CONSTRAINT ordered_jobs_max_attempts_check,
    DROP CONSTRAINT ordered_jobs_lease_iff_running;
ALTER TABLE ordered_keys
    DROP CONSTRAINT ordered_keys_gap_action_check,
    DROP CONSTRAINT ordered_keys_gap_timeout_check,
    DROP CONSTRAINT ordered_keys_gap_policy;
