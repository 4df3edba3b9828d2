SELECT s.relname::text
FROM pg_stat_user_tables AS s
JOIN pg_class AS c ON c.oid = s.relid
CROSS JOIN LATERAL (
    SELECT coalesce(max(o.option_value) FILTER (WHERE o.option_name = 'autovacuum_vacuum_threshold'),
                    current_setting('autovacuum_vacuum_threshold'))::float8 AS threshold,
           coalesce(max(o.option_value) FILTER (WHERE o.option_name = 'autovacuum_vacuum_scale_factor'),
                    current_setting('autovacuum_vacuum_scale_factor'))::float8 AS scale,
           coalesce(max(o.option_value) FILTER (WHERE o.option_name = 'autovacuum_vacuum_insert_threshold'),
                    current_setting('autovacuum_vacuum_insert_threshold'))::float8 AS ins_threshold,
           coalesce(max(o.option_value) FILTER (WHERE o.option_name = 'autovacuum_vacuum_insert_scale_factor'),
                    current_setting('autovacuum_vacuum_insert_scale_factor'))::float8 AS ins_scale
    FROM pg_options_to_table(c.reloptions) AS o) AS t
WHERE s.relid IN (to_regclass('ordered_jobs'), to_regclass('ordered_keys'), to_regclass('ordered_heads'))
  AND (s.n_dead_tup > t.threshold + t.scale * greatest(c.reltuples, 0)
       OR s.n_ins_since_vacuum > t.ins_threshold + t.ins_scale * greatest(c.reltuples, 0))
