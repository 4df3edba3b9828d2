-- Terminates the connections of the verify run's workers ($1, their application_name).
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1
