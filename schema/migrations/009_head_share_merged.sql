-- The head lock of a single enqueue from REPEATABLE READ or SERIALIZABLE is taken by
-- ordered_head_insert's probe; the function that took it before the job's insert goes.
DROP FUNCTION IF EXISTS ordered_head_share(text);
