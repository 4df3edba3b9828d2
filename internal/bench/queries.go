package bench

import _ "embed"

// The bench's statements, one file each in queries/.
var (
	// ceilingTableSQL creates the table of the ceiling's single-row updates.
	//go:embed queries/ceiling_table.sql
	ceilingTableSQL string

	// ceilingUpdateSQL is one single-row update of the ceiling.
	//go:embed queries/ceiling_update.sql
	ceilingUpdateSQL string

	// plainTableSQL creates the table of the plain INSERT beside single-event enqueues.
	//go:embed queries/plain_table.sql
	plainTableSQL string

	// plainInsertSQL is one plain one-row INSERT of an event.
	//go:embed queries/plain_insert.sql
	plainInsertSQL string

	// tableStatsSQL reads the job table's dead and live tuples and its size with its indexes, and
	// the head table's dead tuples and size.
	//go:embed queries/table_stats.sql
	tableStatsSQL string

	// autovacuumSettingsSQL reads whether autovacuum runs, and its naptime.
	//go:embed queries/autovacuum_settings.sql
	autovacuumSettingsSQL string

	// autovacuumDueSQL lists the queue tables whose dead tuples or inserts since the last
	// vacuum passed their autovacuum thresholds, from their own storage parameters (the
	// shipped settings) or else the server's.
	//go:embed queries/autovacuum_due.sql
	autovacuumDueSQL string

	// autovacuumCostSQL throttles the session's VACUUM as autovacuum is throttled: a manual
	// VACUUM is not.
	//go:embed queries/autovacuum_cost.sql
	autovacuumCostSQL string
)
