-- Where the archive cursor is: the rounds it has gone past the end of the keys, and the key it
-- goes on after.
SELECT rounds, after_key FROM ordered_archive_cursor;
