package cli

import (
	"context"
	"errors"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderedq/ordered/internal/verify"
	"github.com/orderedq/ordered/ordered"
)

const verifyExecLong = `With --exec COMMAND, verify proves COMMAND instead: one run (policy block, at least once)
of --keys x --per-key events (--short: 40 x 15) whose worker processes run COMMAND exactly as
ordered work --exec does (the payload {"key":…,"seq":…} on standard input, ORDERED_KEY,
ORDERED_SEQ, ORDERED_ATTEMPT, ORDERED_CLAIM_VERSION and the other ORDERED_* variables; exit 0
done, 65 failed for good, any other retried), under the same faults. COMMAND also gets
ORDERED_VERIFY_EFFECTS, a file to which it appends one line "$ORDERED_KEY $ORDERED_SEQ" (or
"$ORDERED_KEY $ORDERED_SEQ $ORDERED_CLAIM_VERSION") for each effect it makes. Jobs are retried
and re-run after kills and stalls, so an idempotent COMMAND records an event's effect only if
it is not there yet (under flock: a stale attempt may still run beside the new one).

Checked: no job lost, none failed for good, no event of a key started before the previous one
completed; and, when COMMAND recorded any effect: exactly one effect per done event (none
missing, none duplicated), every line names an enqueued event and is well formed, and each
key's effects come in seq order. The report fits a screen; its last line says whether the run
is clean, and a run that is not exits non-zero.`

// verifyExec runs the chaos run through the user's command (see verify.RunExec).
func (a *app) verifyExec(ctx context.Context, command string, o verify.Options) error {
	if command == "" {
		return errors.New("--exec: the command is empty")
	}
	if err := validateWorkFlags(command, o.Workers, o.Lease, 1, ordered.PollIntervalMin, o.Lease/6); err != nil {
		return err
	}
	return verify.RunExec(ctx, command, o, a.stdout)
}

// verifyExecWorker is a worker process of the run through a command: the handler of ordered
// work --exec, with ORDERED_VERIFY_EFFECTS set and each attempt's start recorded.
func (a *app) verifyExecWorker(w verify.Worker, command, effects string) workerSetup {
	grace := w.Lease / 6
	cfg := execConfig{
		command: command,
		grace:   grace,
		env:     append(commandEnv(os.Environ(), "", false), verify.EffectsEnv+"="+effects),
	}
	wc := w.WorkerConfig()
	wc.StopGrace = grace
	return workerSetup{
		client: w.Config(quietLogger(a.stderr)),
		worker: wc,
		handler: func(pool *pgxpool.Pool) ordered.Handler {
			return verify.RecordStarts(pool, execHandler(cfg, a))
		},
	}
}
