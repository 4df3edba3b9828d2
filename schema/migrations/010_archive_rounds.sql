-- The archive cursor counts the rounds it has gone past the end of the keys, so that a caller
-- can tell when archival has been round every key (ordered archive); ordered_archive returns
-- where the cursor is, a change of its result type, so its file creates it again.
ALTER TABLE ordered_archive_cursor ADD COLUMN rounds bigint NOT NULL DEFAULT 0;
DROP FUNCTION IF EXISTS ordered_archive(interval, integer);
DELETE FROM ordered_functions WHERE name = 'ordered_archive';
