SELECT set_config('vacuum_cost_delay', current_setting('autovacuum_vacuum_cost_delay'), false),
    set_config('vacuum_cost_limit', CASE current_setting('autovacuum_vacuum_cost_limit') WHEN '-1'
        THEN current_setting('vacuum_cost_limit') ELSE current_setting('autovacuum_vacuum_cost_limit') END, false)
