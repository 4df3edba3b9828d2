SELECT n_dead_tup, n_live_tup, pg_total_relation_size(relid)
    FROM pg_stat_user_tables WHERE relid = to_regclass('ordered_jobs')
