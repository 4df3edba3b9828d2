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
	// partitionHeldSQL reads the database clock and the jobs (keys, seqs, claim versions)
	// that the processes $1 hold: running under a claim they started.
	//go:embed queries/partition_held.sql
	partitionHeldSQL string

	// partitionTakeoverSQL is the longest time from a cut ($4) to the first start, by a
	// process other than $5, of each job the cut-off processes held ($1, $2, $3) under a newer
	// claim: when the last of them was taken over (NULL: none was).
	//go:embed queries/partition_takeover.sql
	partitionTakeoverSQL string

	// firstStartAfterSQL is the time from $2 to the first start by one of the processes $1.
	//go:embed queries/first_start_after.sql
	firstStartAfterSQL string
)
