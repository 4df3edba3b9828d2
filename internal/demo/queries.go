package demo

import _ "embed"

// The demo's statements, one file each in queries/.
var (
	// effectsSQL creates the table of the effects the handlers apply.
	//go:embed queries/effects_table.sql
	effectsSQL string

	// effectSQL applies a job's effect.
	//go:embed queries/effect_insert.sql
	effectSQL string

	// inFlightSQL lists the running jobs.
	//go:embed queries/in_flight.sql
	inFlightSQL string

	// retriesSQL counts the retries, and the jobs attempted.
	//go:embed queries/retries.sql
	retriesSQL string

	// laterJobsSQL counts the jobs of a key after a seq, and those of them done.
	//go:embed queries/later_jobs.sql
	laterJobsSQL string

	// lastSettledSQL is when the last of some jobs finished.
	//go:embed queries/last_settled.sql
	lastSettledSQL string

	// effectsInOrderSQL lists the effects in the order they were committed.
	//go:embed queries/effects_in_order.sql
	effectsInOrderSQL string

	// missingEffectsSQL counts the done jobs without an effect.
	//go:embed queries/missing_effects.sql
	missingEffectsSQL string
)
