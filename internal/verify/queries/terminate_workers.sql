SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
    WHERE application_name = $1 AND random() < 0.5
