SELECT current_setting('autovacuum'),
    current_setting('autovacuum_naptime')::interval
