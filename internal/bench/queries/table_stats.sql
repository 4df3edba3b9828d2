SELECT j.n_dead_tup, j.n_live_tup, pg_total_relation_size(j.relid),
       h.n_dead_tup, pg_total_relation_size(h.relid)
FROM pg_stat_user_tables AS j, pg_stat_user_tables AS h
WHERE j.relid = to_regclass('ordered_jobs') AND h.relid = to_regclass('ordered_heads')
