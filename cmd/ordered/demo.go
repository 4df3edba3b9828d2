package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/orderedq/ordered/internal/pgcluster"
	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/orderedui"
	"github.com/orderedq/ordered/schema"
)

// Demo sizes.
const (
	demoCustomers      = 240
	demoCustomersShort = 40
	demoLease          = 2 * time.Second
	// demoLocalURL is tried when no database URL is given.
	demoLocalURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
)

const demoEffectsSQL = `CREATE TABLE demo_effects (
    id         bigserial   PRIMARY KEY,
    key        text        NOT NULL,
    seq        bigint      NOT NULL,
    attempt    integer     NOT NULL,
    worker     text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
)`

func (a *app) demoCmd() *cobra.Command {
	var (
		policyName string
		workers    int
		short      bool
		keep       bool
		eventsFile string
		ui         bool
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the main job: a per-customer event stream through crashing workers, checked for order",
		Long: `Demo enqueues a realistic per-customer event stream (orders, payments, invoices, shipments
for hundreds of customers, with some flaky events and one poison event), runs two worker
processes over it, kills one with SIGKILL midway and starts a replacement, and ends with a
report: events processed, retries, the poisoned customer under the chosen policy, the takeover
after the kill, and a per-key order check over the effects the handlers recorded.

It uses --database-url or DATABASE_URL, else the server on 127.0.0.1:5432, else a private
throwaway PostgreSQL cluster. It works in a schema of its own, dropped at the end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			customers := demoCustomers
			if short {
				customers = demoCustomersShort
			}
			events := demoStream(customers)
			if eventsFile != "" {
				f, err := os.Open(eventsFile)
				if err != nil {
					return err
				}
				events, _, err = readEvents(f)
				f.Close()
				if err != nil {
					return fmt.Errorf("%s: %w", eventsFile, err)
				}
			}
			d := &demo{app: a, policy: policyName, workers: workers, keep: keep, events: events, ui: ui}
			return d.run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&policyName, "policy", "block", "what the poison event does to its customer: block or skip")
	f.IntVar(&workers, "workers", 8, "handlers per worker process")
	f.BoolVar(&short, "short", false, "a smaller stream (for CI)")
	f.BoolVar(&keep, "keep", false, "keep the demo's schema instead of dropping it")
	f.StringVar(&eventsFile, "events", "", "enqueue this JSON Lines file instead of the embedded stream")
	f.BoolVar(&ui, "ui", false, "after the report, serve the dashboard over the demo's queue until interrupted")
	return cmd
}

type demo struct {
	*app
	policy  string
	workers int
	keep    bool
	ui      bool
	events  []ordered.Event

	baseURL string // the database
	url     string // the database, with search_path on the demo's schema
	schema  string
	pool    *pgxpool.Pool
}

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.stdout, format+"\n", args...)
}

func (d *demo) run(ctx context.Context) error {
	cleanup, err := d.database(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	if err := d.setup(ctx); err != nil {
		return err
	}
	defer d.teardown()

	client, err := ordered.NewClient(d.pool, nil)
	if err != nil {
		return err
	}
	for lo := 0; lo < len(d.events); lo += enqueueChunk {
		if _, err := client.EnqueueMany(ctx, d.events[lo:min(lo+enqueueChunk, len(d.events))]); err != nil {
			return err
		}
	}
	keys := map[string]bool{}
	for _, ev := range d.events {
		keys[ev.Key] = true
	}
	d.say("enqueued %d events for %d customers (policy %s)", len(d.events), len(keys), d.policy)

	run, err := d.process(ctx, client)
	if err != nil {
		return err
	}
	if err := d.report(ctx, client, run); err != nil || !d.ui {
		return err
	}
	d.say("the demo's queue stays while the dashboard serves it; interrupt to end both")
	return orderedui.Serve(ctx, client, &orderedui.ServeConfig{Out: d.stdout})
}

// database picks the database: the given URL, else 127.0.0.1:5432, else a private cluster.
func (d *demo) database(ctx context.Context) (cleanup func(), err error) {
	d.baseURL = d.databaseURL
	if d.baseURL == "" {
		d.baseURL = os.Getenv("DATABASE_URL")
	}
	if d.baseURL != "" {
		return func() {}, nil
	}
	local := cmp.Or(os.Getenv("ORDERED_LOCAL_URL"), demoLocalURL) // tests point it at a closed port
	probe, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(probe, local); err == nil {
		conn.Close(ctx)
		d.baseURL = local
		d.say("using the PostgreSQL server on 127.0.0.1:5432")
		return func() {}, nil
	}
	d.say("no DATABASE_URL and no server on 127.0.0.1:5432: starting a private PostgreSQL cluster")
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		return nil, fmt.Errorf("start a private PostgreSQL: %w", err)
	}
	d.baseURL = cluster.URL()
	return func() { _ = cluster.Close() }, nil
}

// setup creates the demo's own schema, migrates it and creates the effects table.
func (d *demo) setup(ctx context.Context) error {
	d.schema = fmt.Sprintf("ordered_demo_%d", time.Now().UnixNano())
	conn, err := pgx.Connect(ctx, d.baseURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	// The name is generated here, never taken from input; identifiers cannot be parameters.
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{d.schema}.Sanitize()); err != nil {
		return err
	}
	u, err := url.Parse(d.baseURL)
	if err != nil {
		return err
	}
	q := u.Query()
	q.Set("options", "-csearch_path="+d.schema)
	u.RawQuery = q.Encode()
	d.url = u.String()

	cfg, err := pgxpool.ParseConfig(d.url)
	if err != nil {
		return err
	}
	cfg.MaxConns = 4
	if d.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return err
	}
	if _, err := schema.Migrate(ctx, d.pool); err != nil {
		return err
	}
	_, err = d.pool.Exec(ctx, demoEffectsSQL)
	return err
}

func (d *demo) teardown() {
	if d.pool != nil {
		d.pool.Close()
	}
	if d.keep {
		d.say("kept schema %s", d.schema)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.baseURL)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{d.schema}.Sanitize()+" CASCADE")
}

// workerProc is one demo worker process.
type workerProc struct {
	name string
	cmd  *exec.Cmd
}

func (d *demo) startWorker(name string) (*workerProc, error) {
	cmd, err := spawnSelf(io.Discard, d.stderr, "demo-worker", "--database-url", d.url, "--name", name,
		"--policy", d.policy, "--workers", fmt.Sprint(d.workers), "--lease", demoLease.String())
	if err != nil {
		return nil, fmt.Errorf("start worker %s: %w", name, err)
	}
	return &workerProc{name: name, cmd: cmd}, nil
}

// demoRun is what happened while the workers ran.
type demoRun struct {
	elapsed     time.Duration
	killedAt    time.Time // by the database clock
	killedName  string
	inFlight    []int64 // jobs running when the worker was killed
	killPercent int
}

// process runs the workers until every job that can finish has, killing one worker midway.
func (d *demo) process(ctx context.Context, client *ordered.Client) (*demoRun, error) {
	run := &demoRun{}
	procs := []*workerProc{}
	defer func() {
		for _, p := range procs {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			_ = p.cmd.Wait()
		}
	}()
	for _, name := range []string{"worker-1", "worker-2"} {
		p, err := d.startWorker(name)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
	}
	d.say("started 2 worker processes with %d handlers each (lease %s)", d.workers, demoLease)

	total := len(d.events)
	start := time.Now()
	bar := newProgress(d.stdout, total)
	killed := false
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		var settled, pending int
		if err := d.pool.QueryRow(ctx, demoProgressSQL).Scan(&settled, &pending); err != nil {
			return nil, err
		}
		bar.show(settled)
		if !killed && settled*100 >= total*40 {
			killed = true
			victim := procs[0]
			if err := d.pool.QueryRow(ctx, demoInFlightSQL).Scan(&run.inFlight); err != nil {
				return nil, err
			}
			_ = victim.cmd.Process.Kill()
			_ = victim.cmd.Wait()
			if err := d.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&run.killedAt); err != nil {
				return nil, err
			}
			run.killedName, run.killPercent = victim.name, settled*100/total
			procs = procs[1:]
			bar.note(fmt.Sprintf("SIGKILL %s at %d%% (%d jobs in flight); starting worker-3", victim.name, run.killPercent, len(run.inFlight)))
			p, err := d.startWorker("worker-3")
			if err != nil {
				return nil, err
			}
			procs = append(procs, p)
		}
		if pending == 0 {
			bar.done(settled)
			run.elapsed = time.Since(start)
			return run, nil
		}
	}
}

// demoProgressSQL counts settled jobs (done or failed) and those still to run: queued or
// running jobs, except those waiting behind a blocked key.
const demoProgressSQL = `SELECT
    count(*) FILTER (WHERE status IN ('done', 'failed', 'blocked')),
    count(*) FILTER (WHERE status IN ('queued', 'running') AND NOT EXISTS (
        SELECT 1 FROM ordered_jobs AS b WHERE b.key = j.key AND b.status = 'blocked'))
FROM ordered_jobs AS j`

const demoInFlightSQL = `SELECT coalesce(array_agg(id), '{}') FROM ordered_jobs WHERE status = 'running'`

// report prints the outcome and checks per-key order over the recorded effects.
func (d *demo) report(ctx context.Context, client *ordered.Client, run *demoRun) error {
	stats, err := client.Stats(ctx)
	if err != nil {
		return err
	}
	var retries, attempted int64
	if err := d.pool.QueryRow(ctx, `SELECT coalesce(sum(attempts - 1) FILTER (WHERE attempts > 1), 0),
		count(*) FILTER (WHERE attempts > 0) FROM ordered_jobs`).Scan(&retries, &attempted); err != nil {
		return err
	}
	d.say("")
	d.say("report")
	d.say("  events          %d enqueued, %d done, %d failed, %d waiting behind a blocked key", len(d.events), stats.Done, stats.Failed+stats.Blocked, stats.Queued)
	d.say("  time            %s (%.0f events/s)", run.elapsed.Round(time.Millisecond), float64(stats.Done)/run.elapsed.Seconds())
	d.say("  retries         %d (flaky events, and the jobs of the killed worker)", retries)

	failed, err := client.FailedJobs(ctx, ordered.FailedJobsParams{})
	if err != nil {
		return err
	}
	for _, f := range failed {
		var later, laterDone int
		if err := d.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'done')
			FROM ordered_jobs WHERE key = $1 AND seq > $2`, f.Key, f.Seq).Scan(&later, &laterDone); err != nil {
			return err
		}
		if f.Blocking {
			d.say("  poison          %s seq %d (%s) failed: %s", f.Key, f.Seq, f.Kind, f.LastError)
			d.say("                  policy block: the key is blocked, its %d later events wait (ordered replay %d / ordered skip %d)", later-laterDone, f.ID, f.ID)
		} else {
			d.say("  poison          %s seq %d (%s) failed: %s", f.Key, f.Seq, f.Kind, f.LastError)
			d.say("                  policy skip: kept for investigation, its %d later events ran", laterDone)
		}
	}

	if run.killedName != "" {
		var lastDone *time.Time
		if err := d.pool.QueryRow(ctx, `SELECT max(finished_at) FROM ordered_jobs WHERE id = ANY($1)`, run.inFlight).Scan(&lastDone); err != nil {
			return err
		}
		takeover := "none were in flight"
		if lastDone != nil {
			takeover = fmt.Sprintf("all settled %.1fs after the kill (lease %s)", lastDone.Sub(run.killedAt).Seconds(), demoLease)
		}
		d.say("  crash           %s killed with SIGKILL at %d%%, %d jobs in flight: %s", run.killedName, run.killPercent, len(run.inFlight), takeover)
	}

	check, err := d.checkOrder(ctx)
	if err != nil {
		return err
	}
	d.say("  order check     %d effects over %d keys: %d order violations, %d duplicate effects, %d done jobs without effect",
		check.effects, check.keys, check.violations, check.duplicates, check.missing)
	if check.violations+check.duplicates+check.missing > 0 {
		return errors.New("demo: the order check failed")
	}
	d.say("  result          clean: every customer's events ran once, in order")
	return nil
}

type orderCheck struct {
	effects, keys, violations, duplicates, missing int
}

// checkOrder reads the effects in commit order: within a key they must come in increasing
// seq, each once, and every done job must have one.
func (d *demo) checkOrder(ctx context.Context) (orderCheck, error) {
	var c orderCheck
	rows, err := d.pool.Query(ctx, `SELECT key, seq FROM demo_effects ORDER BY id`)
	if err != nil {
		return c, err
	}
	last := map[string]int64{}
	seen := map[string]bool{}
	for rows.Next() {
		var key string
		var seq int64
		if err := rows.Scan(&key, &seq); err != nil {
			return c, err
		}
		c.effects++
		id := key + "/" + fmt.Sprint(seq)
		if seen[id] {
			c.duplicates++
		}
		seen[id] = true
		if prev, ok := last[key]; ok && seq <= prev {
			c.violations++
		}
		last[key] = seq
	}
	if err := rows.Err(); err != nil {
		return c, err
	}
	c.keys = len(last)
	err = d.pool.QueryRow(ctx, `SELECT count(*) FROM ordered_jobs AS j WHERE status = 'done'
		AND NOT EXISTS (SELECT 1 FROM demo_effects AS e WHERE e.key = j.key AND e.seq = j.seq)`).Scan(&c.missing)
	return c, err
}

// progress draws a progress bar, redrawn in place on a terminal and as lines elsewhere.
type progress struct {
	w        io.Writer
	total    int
	tty      bool
	lastLine time.Time
}

func newProgress(w io.Writer, total int) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progress{w: w, total: total, tty: tty}
}

func (p *progress) line(n int) string {
	const width = 40
	filled := n * width / max(p.total, 1)
	return fmt.Sprintf("[%s%s] %d/%d", strings.Repeat("#", filled), strings.Repeat(".", width-filled), n, p.total)
}

func (p *progress) show(n int) {
	if p.tty {
		fmt.Fprintf(p.w, "\r%s", p.line(n))
		return
	}
	if time.Since(p.lastLine) >= time.Second {
		p.lastLine = time.Now()
		fmt.Fprintln(p.w, p.line(n))
	}
}

func (p *progress) note(s string) {
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintln(p.w, s)
}

func (p *progress) done(n int) {
	if p.tty {
		fmt.Fprintf(p.w, "\r%s\n", p.line(n))
		return
	}
	fmt.Fprintln(p.w, p.line(n))
}
