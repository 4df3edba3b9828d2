-- Which of the migrator's tables the search_path finds, the schemas it finds them in ('' for
-- none), the connection's current schema, where the migrator creates what it creates, and the
-- database's encoding.
-- CREATE TABLE IF NOT EXISTS needs the CREATE privilege even when the table exists, and a role
-- without it may check for updates.
SELECT coalesce((SELECT n.nspname::text FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
                 WHERE c.oid = to_regclass('ordered_migrations')), ''),
       coalesce((SELECT n.nspname::text FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
                 WHERE c.oid = to_regclass('ordered_functions')), ''),
       coalesce(current_schema(), ''),
       current_setting('server_encoding')
