package verify

import _ "embed"

// The chaos run's statements, one file each in queries/.
var (
	// tablesSQL creates the tables of the history: the attempts' starts and the effects.
	//go:embed queries/tables.sql
	tablesSQL string

	// startSQL records the start of an attempt.
	//go:embed queries/start_insert.sql
	startSQL string

	// effectSQL applies an effect, in the completion's transaction.
	//go:embed queries/effect_insert.sql
	effectSQL string

	// fencedEffectSQL applies an effect only while the claim is current: a receiver that
	// honours fencing tokens.
	//go:embed queries/fenced_effect_insert.sql
	fencedEffectSQL string

	// terminateSQL terminates about half of the workers' connections.
	//go:embed queries/terminate_workers.sql
	terminateSQL string

	// jobsSQL, startsSQL and effectsSQL read the history.
	//go:embed queries/jobs.sql
	jobsSQL string
	//go:embed queries/starts.sql
	startsSQL string
	//go:embed queries/effects.sql
	effectsSQL string

	// recoverySQL is the longest time from a kill ($2) to the next start of each job that the
	// killed process ($1) had started last and not finished by then.
	//go:embed queries/recovery.sql
	recoverySQL string
)

// Statements of the hosts mode.
var (
	// partitionTakeoverSQL counts the jobs that the processes of a partitioned host ($1) had
	// started last and not finished by the cut ($2), and the longest time from the cut to the
	// first start of one of them by another process: when the last was taken over (NULL: none).
	//go:embed queries/partition_takeover.sql
	partitionTakeoverSQL string

	// firstStartAfterSQL is the time from $2 to the first start by one of the processes $1.
	//go:embed queries/first_start_after.sql
	firstStartAfterSQL string
)
