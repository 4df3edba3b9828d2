-- Batches claim only their first job (docs/design.md, "Batches"). A running job's batch_to is
-- the seq of the last job of the batch it leads: the key's open jobs above it up to batch_to
-- are the batch's later jobs, which stay queued and untouched until the batch settles them.
-- Null: the job runs alone. Every claim writes it; it means something only on a running job
-- (and, for the batch's recovery and its lost answer, on the done job that led it).
ALTER TABLE ordered_jobs ADD COLUMN batch_to bigint;
