-- ordered_jobs_complete_batch returns whether each job its trailing claim took was recovered
-- from an expired lease. A function's result type cannot be replaced, so the function goes
-- here, once, and is forgotten by the migrator, which then creates it from its file. Its grants
-- go with it: a role given EXECUTE on it alone is to be given it again.
DROP FUNCTION IF EXISTS ordered_jobs_complete_batch(bigint[], bigint[], integer, integer, interval);
DELETE FROM ordered_functions WHERE name = 'ordered_jobs_complete_batch';
