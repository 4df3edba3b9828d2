-- ordered_archive can walk the keys from a key its caller gives (ordered archive walks them all
-- once, apart from the workers' shared cursor) and wait for another archiver: its result type
-- changes, so its file creates it again.
DROP FUNCTION IF EXISTS ordered_archive(interval, integer);
DELETE FROM ordered_functions WHERE name = 'ordered_archive';
