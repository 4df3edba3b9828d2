-- The connection's current schema and the migrations recorded in the ordered_migrations table
-- that its search_path finds (as the queue's own queries find their tables).
SELECT coalesce(current_schema(), ''), coalesce(array_agg(version ORDER BY version), '{}')::integer[]
FROM ordered_migrations
