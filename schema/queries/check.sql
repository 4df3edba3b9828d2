-- The connection's current schema, the migrations recorded in the ordered_migrations table that
-- its search_path finds (as the queue's own queries find their tables), the schema it finds
-- that table in, and the functions recorded in ordered_functions with their checksums.
SELECT coalesce(current_schema(), ''),
       (SELECT coalesce(array_agg(version ORDER BY version), '{}')::integer[] FROM ordered_migrations),
       (SELECT n.nspname::text FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
        WHERE c.oid = to_regclass('ordered_migrations')),
       (SELECT coalesce(array_agg(name ORDER BY name), '{}')::text[] FROM ordered_functions),
       (SELECT coalesce(array_agg(checksum ORDER BY name), '{}')::text[] FROM ordered_functions)
