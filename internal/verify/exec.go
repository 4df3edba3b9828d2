package verify

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderedq/ordered/internal/pgcluster"
	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/history"
)

// EffectsEnv names the file, in the environment of a --exec command under RunExec, to which the
// command appends a line "KEY SEQ" (or "KEY SEQ CLAIM_VERSION") for each effect it makes.
const EffectsEnv = "ORDERED_VERIFY_EFFECTS"

// execMaxAttempts is the attempts of an event in the run through a command: the faults cost
// attempts (a kill, a stall past the lease), more of them under load.
const execMaxAttempts = 25

// execPolicy is the policy of the run through a user's command: with block, a job the command
// fails for good holds its key, which the report shows.
const execPolicy = "block"

// RunExec is the chaos run through a user's command: one run, at least once, whose worker
// processes run command the way `ordered work --exec` does (payload on stdin, the ORDERED_*
// variables, exit 0 done, 65 failed for good, other retried), plus EffectsEnv, under the same
// faults as Run. It checks the history of starts and completions and, when the command
// recorded any effect, its effects: each done event has exactly one, each line names an
// enqueued event, and a key's effects come in seq order. It fails when the run is not clean.
func RunExec(ctx context.Context, command string, o Options, out io.Writer) error {
	if strings.TrimSpace(command) == "" {
		return errors.New("--exec: the command is empty")
	}
	dir, err := os.MkdirTemp("", "ordered-verify-exec-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	effects := filepath.Join(dir, "effects")
	if err := os.WriteFile(effects, nil, 0o644); err != nil {
		return err
	}

	fmt.Fprintf(out, "starting a private PostgreSQL cluster (it is restarted during the run)\n")
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		return fmt.Errorf("verify needs a private PostgreSQL cluster: %w", err)
	}
	defer cluster.Close()

	r := &run{o: o, cluster: cluster, policy: execPolicy, command: command, effects: effects,
		rng: rand.New(rand.NewPCG(7, 11)), res: result{name: "exec/at-least-once"}}
	start := time.Now()
	if err := r.setup(ctx, "verify_exec"); err != nil {
		return err
	}
	defer r.pool.Close()
	if err := r.enqueueExec(ctx); err != nil {
		return err
	}
	defer r.killWorkers()
	if err := r.startWorkers(ctx); err != nil {
		return err
	}
	if err := r.injectFaults(ctx); err != nil {
		return err
	}
	for _, p := range r.procs {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	// Every worker, and with it every guard and command, is gone before the effects are read.
	r.killWorkers()
	rep, err := r.checkExec(ctx)
	if err != nil {
		return err
	}
	r.res.elapsed = time.Since(start)
	return printExec(out, command, o, r.res, rep)
}

// execPayload is an event's payload in the run through a command.
type execPayload struct {
	Key string `json:"key"`
	Seq int64  `json:"seq"`
}

// enqueueExec enqueues the workload of the run through a command: o.Keys keys of o.PerKey
// events, each payload {"key":…,"seq":…}.
func (r *run) enqueueExec(ctx context.Context) error {
	var events []ordered.Event
	for k := range r.o.Keys {
		key := fmt.Sprintf("key-%03d", k)
		for s := range r.o.PerKey {
			body, _ := json.Marshal(execPayload{Key: key, Seq: int64(s)})
			events = append(events, ordered.Event{Key: key, Seq: int64(s), Payload: body, MaxAttempts: execMaxAttempts})
			r.enqueued = append(r.enqueued, history.ID{Key: key, Seq: int64(s)})
		}
	}
	client, err := ordered.NewClient(r.pool, nil)
	if err != nil {
		return err
	}
	_, err = client.EnqueueMany(ctx, events)
	return err
}

// execReport is the check of a run through a command.
type execReport struct {
	history.Report
	// Recorded says whether the command recorded any effect; if not, effects are not checked.
	Recorded bool
	// Lines counts the effect lines; Missing the done events without an effect; Unknown the
	// lines naming no enqueued event; Malformed the lines that are not "KEY SEQ [CLAIM]".
	Lines, Missing, Unknown, Malformed int
	// LostJobs counts the events that never finished (Lost without the missing effects).
	LostJobs int
	Problems []string
	// Broken names the queue's invariants that its rows broke, under way or at the end
	// (package invariant).
	Broken []string
}

// clean reports whether the run through the command kept every guarantee.
func (e *execReport) clean() bool {
	return e.LostJobs == 0 && e.OrderInversions == 0 && e.UnexpectedFailures == 0 &&
		e.DuplicateEffects == 0 && e.Missing == 0 && e.Unknown == 0 && e.Malformed == 0 && len(e.Broken) == 0
}

// checkExec reads the history, with the effects from the command's file, and checks it.
func (r *run) checkExec(ctx context.Context) (execReport, error) {
	h, err := readHistory(ctx, r.pool, r.enqueued, r.expected)
	if err != nil {
		return execReport{}, err
	}
	f, err := os.Open(r.effects)
	if err != nil {
		return execReport{}, err
	}
	defer f.Close()
	effects, bad, err := ParseEffects(f)
	if err != nil {
		return execReport{}, fmt.Errorf("read %s: %w", r.effects, err)
	}
	rep := CheckEffects(h, effects, bad)
	if rep.Broken, err = r.brokenInvariants(ctx); err != nil {
		return rep, err
	}
	r.res.maxRecovery, err = maxRecovery(ctx, r.pool, r.kills)
	return rep, err
}

// ParseEffects reads an effects file: a line "KEY SEQ" or "KEY SEQ CLAIM_VERSION" per effect,
// in the order they were made (blank lines are ignored). It returns the effects, each with its
// line number as Order, and a description of each malformed line, by its number.
func ParseEffects(r io.Reader) (effects []history.Effect, malformed []string, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := int64(1); sc.Scan(); n++ {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		e := history.Effect{ID: history.ID{Key: fields[0]}, Order: n}
		var perr error
		if len(fields) != 2 && len(fields) != 3 {
			perr = fmt.Errorf("want KEY SEQ [CLAIM_VERSION], got %d fields", len(fields))
		} else if e.Seq, perr = strconv.ParseInt(fields[1], 10, 64); perr != nil {
			perr = fmt.Errorf("SEQ %q is not an integer", fields[1])
		} else if len(fields) == 3 {
			if e.ClaimVersion, perr = strconv.ParseInt(fields[2], 10, 64); perr != nil {
				perr = fmt.Errorf("CLAIM_VERSION %q is not an integer", fields[2])
			}
		}
		if perr != nil {
			malformed = append(malformed, fmt.Sprintf("effects line %d %q: %v", n, line, perr))
			continue
		}
		effects = append(effects, e)
	}
	return effects, malformed, sc.Err()
}

// CheckEffects checks a history whose effects a command recorded (h.Effects is ignored):
// history.Check with effects when any line was recorded, without them otherwise; plus the
// lines that name no enqueued event and the malformed ones.
func CheckEffects(h history.History, effects []history.Effect, malformed []string) execReport {
	e := execReport{Recorded: len(effects) > 0 || len(malformed) > 0, Lines: len(effects) + len(malformed),
		Malformed: len(malformed)}
	enqueued := make(map[history.ID]bool, len(h.Enqueued))
	for _, id := range h.Enqueued {
		enqueued[id] = true
	}
	h.Effects = nil
	for _, ef := range effects {
		if !enqueued[ef.ID] {
			e.Unknown++
			e.Problems = append(e.Problems, fmt.Sprintf("effects line %d names %s, which was not enqueued", ef.Order, ef.ID))
			continue
		}
		h.Effects = append(h.Effects, ef)
	}
	e.Problems = append(e.Problems, malformed...)
	e.Report = history.Check(h)
	// A done event without an effect: lost work when effects are recorded; nothing to say
	// when the command records none.
	missing := "is done but its effect is missing"
	for _, p := range e.Report.Problems {
		if strings.HasSuffix(p, missing) && !e.Recorded {
			continue
		}
		e.Problems = append(e.Problems, p)
	}
	have := make(map[history.ID]bool, len(h.Effects))
	for _, ef := range h.Effects {
		have[ef.ID] = true
	}
	for _, j := range h.Jobs {
		if j.Status == "done" && enqueued[j.ID] {
			if !have[j.ID] {
				e.Missing++
			}
		}
	}
	e.LostJobs = e.Lost - e.Missing
	if !e.Recorded {
		e.Missing = 0
	}
	return e
}

// printExec prints the one-screen report of a run through a command and its last line.
func printExec(out io.Writer, command string, o Options, res result, e execReport) error {
	fmt.Fprintf(out, "run through %q: %d keys x %d events, %d processes x %d workers, lease %s, policy %s; done in %s\n",
		command, o.Keys, o.PerKey, o.Processes, o.Workers, o.Lease, execPolicy, res.elapsed.Round(100*time.Millisecond))
	fmt.Fprintf(out, "faults:  %d kills (-9), %d stalls past the lease, %d connections terminated, %d PostgreSQL restarts; max recovery %s\n",
		res.kills, res.stalls, res.terminations, res.restarts, res.maxRecovery.Round(10*time.Millisecond))
	fmt.Fprintf(out, "jobs:    %d enqueued, %d completed, %d failed (unexpected %d), %d held, %d lost, %d re-executions (allowed)\n",
		e.Enqueued, e.Completed, e.Failed, e.UnexpectedFailures, e.Held, e.LostJobs, e.ReExecutions)
	if e.Recorded {
		fmt.Fprintf(out, "effects: %d lines in $%s: %d duplicate, %d missing, %d naming no event, %d malformed\n",
			e.Lines, EffectsEnv, e.DuplicateEffects, e.Missing, e.Unknown, e.Malformed)
	} else {
		fmt.Fprintf(out, "effects: none recorded in $%s; effects not checked (only starts and completions)\n", EffectsEnv)
	}
	fmt.Fprintf(out, "order:   %d inversions (starts after an earlier event's completion; effects in seq order)\n", e.OrderInversions)
	shown := min(len(e.Problems), 20)
	for _, p := range e.Problems[:shown] {
		fmt.Fprintln(out, "  "+p)
	}
	if len(e.Problems) > shown {
		fmt.Fprintf(out, "  … and %d more\n", len(e.Problems)-shown)
	}
	for _, b := range e.Broken {
		fmt.Fprintln(out, "  invariant "+b)
	}
	if !e.clean() {
		fmt.Fprintf(out, "verify: NOT CLEAN: %s\n", strings.Join(e.violations(), ", "))
		return errors.New("verify: the run is not clean")
	}
	fmt.Fprintf(out, "verify: clean: %d events through the command, no lost job, no order inversion", e.Enqueued)
	if e.Recorded {
		fmt.Fprint(out, ", no duplicate or missing effect")
	}
	fmt.Fprintln(out)
	return nil
}

// violations names the violations of a run that is not clean, with their counts.
func (e *execReport) violations() []string {
	var v []string
	for _, c := range []struct {
		n    int
		name string
	}{{e.LostJobs, "lost jobs"}, {e.UnexpectedFailures, "jobs failed for good"}, {e.OrderInversions, "order inversions"},
		{e.DuplicateEffects, "duplicate effects"}, {e.Missing, "missing effects"}, {e.Unknown, "effects naming no event"},
		{e.Malformed, "malformed effect lines"}, {len(e.Broken), "broken invariants"}} {
		if c.n > 0 {
			v = append(v, fmt.Sprintf("%d %s", c.n, c.name))
		}
	}
	return v
}

// RecordStarts wraps the handler of a worker process of RunExec: it records each attempt's
// start, then runs h.
func RecordStarts(pool *pgxpool.Pool, h ordered.HandlerFunc) ordered.HandlerFunc {
	pid := os.Getpid()
	return func(ctx context.Context, job *ordered.Job) error {
		if _, err := pool.Exec(ctx, startSQL, job.Key, job.Seq, job.ClaimVersion, pid, ""); err != nil {
			return err
		}
		return h(ctx, job)
	}
}
