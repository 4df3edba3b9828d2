// Package demo is `ordered demo`, the main job: a realistic per-customer event stream (see
// Stream) is enqueued and run by two worker processes, one of which is killed with SIGKILL
// midway and replaced; a report ends it, with a per-key order check over the effects the
// handlers recorded.
//
// The worker processes are this binary run with WorkerCommand, which the binary must dispatch
// to a worker built from a Worker. Run works in a schema of its own, dropped at its end.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderedq/ordered/internal/harness"
	"github.com/orderedq/ordered/ordered"
)

// Options are the settings of a demo run.
type Options struct {
	// DatabaseURL is the database; empty: the server on 127.0.0.1:5432, else a private
	// cluster.
	DatabaseURL string
	// Policy is what the poison event does to its customer: block or skip.
	Policy string
	// Workers is the number of handlers of each worker process.
	Workers int
	// Keep keeps the demo's schema instead of dropping it.
	Keep bool
	// Events is the stream to enqueue; nil: Stream(Customers).
	Events []ordered.Event
	// Stderr takes the worker processes' standard error.
	Stderr io.Writer
	// Serve, when set, runs after a clean report over the demo's queue (the dashboard, for
	// ordered demo --ui) until it returns; the schema is dropped after it.
	Serve func(ctx context.Context, client *ordered.Client) error
}

// enqueueChunk is the most events enqueued in one statement.
const enqueueChunk = 10_000

// demo is one run of the demo.
type demo struct {
	Options
	// private: the run's database is a private cluster, removed at its end
	private bool
	out     io.Writer
	schema  *harness.Schema
	pool    *pgxpool.Pool
}

// Run runs the demo, showing its progress and then its report on out. It fails when the order
// check finds a problem.
func Run(ctx context.Context, o Options, out io.Writer) error {
	if o.Events == nil {
		o.Events = Stream(Customers)
	}
	d := &demo{Options: o, out: out}
	db, err := harness.OpenDatabase(ctx, o.DatabaseURL, out)
	if err != nil {
		return err
	}
	defer db.Close()
	if db.Private && o.Keep {
		return errors.New("--keep: the private cluster goes at the end of the run, with the queue in it; " +
			"give a database (--database-url or DATABASE_URL) to keep the queue in")
	}
	d.private = db.Private
	if err := d.setup(ctx, db.URL); err != nil {
		return err
	}
	defer d.teardown()
	client, err := ordered.NewClient(d.pool, nil)
	if err != nil {
		return err
	}
	if err := d.enqueue(ctx, client); err != nil {
		return err
	}
	run, err := d.process(ctx)
	if err != nil {
		return err
	}
	if err := d.report(ctx, client, run); err != nil || o.Serve == nil {
		return err
	}
	d.say("the demo's queue stays while the dashboard serves it; interrupt to end both")
	return o.Serve(ctx, client)
}

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, format+"\n", args...)
}

// setup creates the demo's own schema, migrates it and creates the effects table.
func (d *demo) setup(ctx context.Context, baseURL string) (err error) {
	if d.schema, err = harness.CreateSchema(ctx, baseURL, fmt.Sprintf("ordered_demo_%d", time.Now().UnixNano())); err != nil {
		return err
	}
	if d.pool, err = d.schema.MigratedPool(ctx, 4); err != nil {
		return err
	}
	_, err = d.pool.Exec(ctx, effectsSQL)
	return err
}

func (d *demo) teardown() {
	if d.pool != nil {
		d.pool.Close()
	}
	if d.Keep {
		if u := reachURL(d.schema.BaseURL, d.schema.Name); u != "" {
			d.say("kept schema %s: ordered status --database-url '%s' (and the other commands) reach it", d.schema.Name, u)
		} else {
			d.say("kept schema %s: set search_path=%s in the connection's settings to reach it", d.schema.Name, d.schema.Name)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = d.schema.Drop(ctx)
}

// enqueue enqueues the events a chunk at a time.
func (d *demo) enqueue(ctx context.Context, client *ordered.Client) error {
	for lo := 0; lo < len(d.Events); lo += enqueueChunk {
		if _, err := client.EnqueueMany(ctx, d.Events[lo:min(lo+enqueueChunk, len(d.Events))]); err != nil {
			return err
		}
	}
	keys := map[string]bool{}
	for _, ev := range d.Events {
		keys[ev.Key] = true
	}
	d.say("enqueued %d events for %d customers (policy %s)", len(d.Events), len(keys), d.Policy)
	return nil
}

// workerProc is one demo worker process.
type workerProc struct {
	name string
	*harness.Child
}

func (d *demo) startWorker(name string) (*workerProc, error) {
	cmd, err := harness.SpawnSelf(io.Discard, d.Stderr, WorkerCommand, "--database-url", d.schema.BaseURL, "--schema", d.schema.Name, "--name", name,
		"--policy", d.Policy, "--workers", strconv.Itoa(d.Workers), "--lease", Lease.String())
	if err != nil {
		return nil, fmt.Errorf("start worker %s: %w", name, err)
	}
	return &workerProc{name: name, Child: harness.Watch(cmd)}, nil
}

// reachURL is the database URL base with schema on its search path and its password hidden,
// for an operator to reach a kept queue; empty when base is no URL (a key=value string).
func reachURL(base, schema string) string {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return ""
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.Redacted()
}

// anyExited returns an error for the first of procs that has exited: a worker ends only when
// the demo stops or kills it, so the run could not finish without it.
func anyExited(procs []*workerProc) error {
	for _, p := range procs {
		if how, exited := p.HasExited(); exited {
			return fmt.Errorf("worker process %s ended before the run did (%s); its error, if any, is above", p.name, how)
		}
	}
	return nil
}

// stopWorkers asks the workers to stop and waits for them.
func stopWorkers(procs []*workerProc) {
	for _, p := range procs {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		<-p.Exited()
	}
}
