package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os/exec"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/orderedq/ordered/internal/pgcluster"
	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/history"
	"github.com/orderedq/ordered/schema"
)

// verifyAppName marks the workers' connections, the targets of the connection faults.
const verifyAppName = "ordered-verify-worker"

const verifyTablesSQL = `
CREATE TABLE verify_starts (
    id            bigserial   PRIMARY KEY,
    key           text        NOT NULL,
    seq           bigint      NOT NULL,
    claim_version bigint      NOT NULL,
    pid           integer     NOT NULL,
    at            timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE verify_effects (
    id            bigserial   PRIMARY KEY,
    key           text        NOT NULL,
    seq           bigint      NOT NULL,
    claim_version bigint      NOT NULL
)`

type verifyOpts struct {
	keys, perKey, processes, workers int
	lease, work                      time.Duration
	timeout                          time.Duration
}

func (a *app) verifyCmd() *cobra.Command {
	var (
		short bool
		o     verifyOpts
	)
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "The chaos run: a workload through crashes, stalls, dropped connections and a PostgreSQL restart, with its history checked",
		Long: `Verify starts a private PostgreSQL cluster, and for each failure policy (block, skip) and
each kind of handler (transactional: effect committed with the completion; at-least-once:
effect applied before it, by a receiver that checks the claim like a fencing token, so it may
land twice but never out of order) enqueues events over many keys (some flaky, one poison), runs
several worker processes over them and injects faults while they run: SIGKILL of a worker
(restarted), SIGSTOP past its lease then SIGCONT, pg_terminate_backend of the workers'
connections, and a restart of PostgreSQL. Every attempt and effect is recorded on the
database clock and the history is checked: lost jobs, duplicated effects, re-executions,
order inversions, failures beyond the poison events, and the longest recovery after a kill.
The last line says whether the run is clean; a run that is not exits non-zero.

Full form: 4 runs of 200 keys x 25 events, about 4 minutes. --short: 4 runs of 40 x 15,
under 2 minutes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if short {
				o.keys, o.perKey = 40, 15
			}
			return a.verify(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&short, "short", false, "the short form (CI)")
	f.IntVar(&o.keys, "keys", 200, "keys per run")
	f.IntVar(&o.perKey, "per-key", 25, "events per key")
	f.IntVar(&o.processes, "processes", 3, "worker processes")
	f.IntVar(&o.workers, "workers", 4, "handlers per worker process")
	f.DurationVar(&o.lease, "lease", time.Second, "lease of the workers")
	f.DurationVar(&o.work, "work", 20*time.Millisecond, "mean time a handler works on a job")
	f.DurationVar(&o.timeout, "timeout", 3*time.Minute, "give up a run that has not drained after this long")
	return cmd
}

// verifyResult is one run's figures.
type verifyResult struct {
	name                                  string
	transactional                         bool
	report                                history.Report
	kills, stalls, terminations, restarts int
	maxRecovery                           time.Duration
	elapsed                               time.Duration
}

func (a *app) verify(ctx context.Context, o verifyOpts) error {
	fmt.Fprintf(a.stdout, "starting a private PostgreSQL cluster (it is restarted during each run)\n")
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		return fmt.Errorf("verify needs a private PostgreSQL cluster: %w", err)
	}
	defer cluster.Close()

	var results []verifyResult
	for _, pol := range []string{"block", "skip"} {
		for _, tx := range []bool{true, false} {
			r, err := a.verifyRun(ctx, cluster, o, pol, tx)
			if err != nil {
				return fmt.Errorf("run %s: %w", r.name, err)
			}
			fmt.Fprintf(a.stdout, "run %-24s done in %s\n", r.name, r.elapsed.Round(100*time.Millisecond))
			results = append(results, r)
		}
	}

	fmt.Fprintln(a.stdout)
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tenqueued\tcompleted\tfailed\theld\tlost\tdup effects\tre-executions\tinversions\tkills\tstalls\tconn kills\trestarts\tmax recovery\t")
	clean, events := true, 0
	var problems []string
	for _, r := range results {
		rep := r.report
		events += rep.Enqueued
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", r.name, rep.Enqueued,
			rep.Completed, rep.Failed, rep.Held, rep.Lost, rep.DuplicateEffects, rep.ReExecutions,
			rep.OrderInversions, r.kills, r.stalls, r.terminations, r.restarts, r.maxRecovery.Round(10*time.Millisecond))
		if !rep.Clean(r.transactional) {
			clean = false
			for _, p := range rep.Problems {
				problems = append(problems, r.name+": "+p)
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range problems {
		fmt.Fprintln(a.stdout, "  "+p)
	}
	if !clean {
		fmt.Fprintf(a.stdout, "verify: NOT CLEAN: %d runs, %d events; see the problems above\n", len(results), events)
		return errors.New("verify: the run is not clean")
	}
	fmt.Fprintf(a.stdout, "verify: clean: %d runs, %d events, no lost job, no duplicate transactional effect, no order inversion\n", len(results), events)
	return nil
}

// verifyRun is one run against a fresh schema of the cluster.
func (a *app) verifyRun(ctx context.Context, cluster *pgcluster.Cluster, o verifyOpts, pol string, transactional bool) (verifyResult, error) {
	kind := "at-least-once"
	if transactional {
		kind = "transactional"
	}
	r := verifyResult{name: pol + "/" + kind, transactional: transactional}
	start := time.Now()

	schemaName := fmt.Sprintf("verify_%s_%s", pol, strings.ReplaceAll(kind, "-", "_"))
	admin, err := pgx.Connect(ctx, cluster.URL())
	if err != nil {
		return r, err
	}
	ident := pgx.Identifier{schemaName}.Sanitize()
	_, err = admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident+" CASCADE; CREATE SCHEMA "+ident)
	admin.Close(ctx)
	if err != nil {
		return r, err
	}
	u, _ := url.Parse(cluster.URL())
	q := u.Query()
	q.Set("options", "-csearch_path="+schemaName)
	u.RawQuery = q.Encode()
	dbURL := u.String()

	poolCfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return r, err
	}
	poolCfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return r, err
	}
	defer pool.Close()
	if _, err := schema.Migrate(ctx, pool); err != nil {
		return r, err
	}
	if _, err := pool.Exec(ctx, verifyTablesSQL); err != nil {
		return r, err
	}

	// The workload: flaky events here and there, one poison event.
	rng := rand.New(rand.NewPCG(uint64(len(pol)), 11))
	var events []ordered.Event
	var enqueued, expected []history.ID
	for k := range o.keys {
		key := fmt.Sprintf("key-%03d", k)
		for s := range o.perKey {
			p := script{}
			if rng.IntN(100) < 5 {
				p.FailAttempts = 1
			}
			if k == o.keys/2 && s == o.perKey/3 {
				p = script{Poison: true}
				expected = append(expected, history.ID{Key: key, Seq: int64(s)})
			}
			body, _ := json.Marshal(p)
			events = append(events, ordered.Event{Key: key, Seq: int64(s), Payload: body, MaxAttempts: 10})
			enqueued = append(enqueued, history.ID{Key: key, Seq: int64(s)})
		}
	}
	client, err := ordered.NewClient(pool, nil)
	if err != nil {
		return r, err
	}
	if _, err := client.EnqueueMany(ctx, events); err != nil {
		return r, err
	}

	workerURL := withAppName(dbURL, verifyAppName)
	spawn := func() (*exec.Cmd, error) {
		args := []string{"verify-worker", "--database-url", workerURL, "--policy", pol,
			"--workers", fmt.Sprint(o.workers), "--lease", o.lease.String(), "--work", o.work.String()}
		if transactional {
			args = append(args, "--transactional")
		}
		return spawnSelf(io.Discard, io.Discard, args...)
	}
	procs := make([]*exec.Cmd, o.processes)
	for i := range procs {
		if procs[i], err = spawn(); err != nil {
			return r, err
		}
	}
	defer func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGCONT)
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	}()

	// Faults at fixed points of progress, so that every run meets each of them, then drain.
	type kill struct {
		pid int
		at  time.Time
	}
	var kills []kill
	faults := []struct {
		at   int // percent of the jobs settled
		kind string
	}{{10, "kill"}, {20, "stall"}, {30, "terminate"}, {45, "restart"}, {60, "kill"}, {70, "terminate"}, {80, "stall"}}
	total := len(events)
	deadline := time.Now().Add(o.timeout)
	for next := 0; ; {
		settled, pending, err := verifyProgress(ctx, pool)
		if err == nil && pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("did not drain within %s (%d jobs pending)", o.timeout, pending)
		}
		if err != nil || next == len(faults) || settled*100 < faults[next].at*total {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		fault := faults[next].kind
		next++
		victim := rng.IntN(len(procs))
		switch fault {
		case "kill":
			pid := procs[victim].Process.Pid
			_ = procs[victim].Process.Kill()
			_ = procs[victim].Wait()
			var at time.Time
			if err := pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&at); err == nil {
				kills = append(kills, kill{pid: pid, at: at})
			}
			if procs[victim], err = spawn(); err != nil {
				return r, err
			}
			r.kills++
		case "stall":
			// Stopped past its lease, the worker wakes up as a stale owner; the run goes on.
			p := procs[victim].Process
			_ = p.Signal(syscall.SIGSTOP)
			time.AfterFunc(o.lease*5/2, func() { _ = p.Signal(syscall.SIGCONT) })
			r.stalls++
		case "terminate":
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE application_name = $1 AND random() < 0.5`, verifyAppName).Scan(&n); err == nil {
				r.terminations += n
			}
		case "restart":
			if err := cluster.Restart(ctx); err != nil {
				return r, fmt.Errorf("restart PostgreSQL: %w", err)
			}
			r.restarts++
		}
	}
	for _, p := range procs {
		_ = p.Process.Signal(syscall.SIGTERM)
	}

	h, err := verifyHistory(ctx, pool, enqueued, expected)
	if err != nil {
		return r, err
	}
	r.report = history.Check(h)

	// Recovery after a kill: from the kill to the next start of each job the killed process
	// had started last and not finished by then.
	for _, k := range kills {
		var worst *time.Duration
		if err := pool.QueryRow(ctx, `
			SELECT max(nxt.at - $2) FROM (
			    SELECT DISTINCT ON (key, seq) key, seq, pid, at FROM verify_starts
			    WHERE at <= $2 ORDER BY key, seq, at DESC) AS last
			JOIN ordered_jobs AS j ON j.key = last.key AND j.seq = last.seq
			CROSS JOIN LATERAL (
			    SELECT min(s.at) AS at FROM verify_starts AS s
			    WHERE s.key = last.key AND s.seq = last.seq AND s.at > $2) AS nxt
			WHERE last.pid = $1 AND (j.finished_at IS NULL OR j.finished_at > $2)`,
			k.pid, k.at).Scan(&worst); err != nil {
			return r, err
		}
		if worst != nil && *worst > r.maxRecovery {
			r.maxRecovery = *worst
		}
	}
	r.elapsed = time.Since(start)
	return r, nil
}

// verifyProgress counts settled jobs (done or failed) and those still to run: queued or
// running, not held behind a blocked key.
func verifyProgress(ctx context.Context, pool *pgxpool.Pool) (settled, pending int, err error) {
	err = pool.QueryRow(ctx, demoProgressSQL).Scan(&settled, &pending)
	return settled, pending, err
}

// verifyHistory reads what the run recorded.
func verifyHistory(ctx context.Context, pool *pgxpool.Pool, enqueued, expected []history.ID) (history.History, error) {
	h := history.History{Enqueued: enqueued, ExpectedFailures: expected}
	rows, err := pool.Query(ctx, `SELECT key, seq, status, finished_at FROM ordered_jobs`)
	if err != nil {
		return h, err
	}
	h.Jobs, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (history.Job, error) {
		var j history.Job
		var finished *time.Time
		err := r.Scan(&j.Key, &j.Seq, &j.Status, &finished)
		if finished != nil {
			j.FinishedAt = *finished
		}
		return j, err
	})
	if err != nil {
		return h, err
	}
	rows, err = pool.Query(ctx, `SELECT key, seq, claim_version, at FROM verify_starts`)
	if err != nil {
		return h, err
	}
	h.Starts, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (history.Start, error) {
		var s history.Start
		return s, r.Scan(&s.Key, &s.Seq, &s.ClaimVersion, &s.At)
	})
	if err != nil {
		return h, err
	}
	rows, err = pool.Query(ctx, `SELECT key, seq, claim_version, id FROM verify_effects`)
	if err != nil {
		return h, err
	}
	h.Effects, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (history.Effect, error) {
		var e history.Effect
		return e, r.Scan(&e.Key, &e.Seq, &e.ClaimVersion, &e.Order)
	})
	return h, err
}

// withAppName sets application_name on a libpq URL.
func withAppName(raw, app string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}
