package orderedtest

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/history"
	"github.com/orderedq/ordered/policy"
)

var (
	//go:embed queries/verify_tables.sql
	verifyTablesSQL string
	//go:embed queries/verify_start_insert.sql
	verifyStartSQL string
	//go:embed queries/verify_effect_insert.sql
	verifyEffectSQL string
	//go:embed queries/verify_starts.sql
	verifyStartsSQL string
	//go:embed queries/verify_effects.sql
	verifyEffectsSQL string
	//go:embed queries/verify_expire_lease.sql
	verifyExpireSQL string
	//go:embed queries/verify_newer_start.sql
	verifyNewerStartSQL string
	//go:embed queries/verify_terminate.sql
	verifyTerminateSQL string
	//go:embed queries/verify_progress.sql
	verifyProgressSQL string
)

// verifyAppName, with the queue's schema, marks the connections of Verify's workers, the
// targets of its connection kills.
const verifyAppName = "orderedtest-verify-"

// VerifyOptions are the sizes of a Verify run; a zero field takes its default.
type VerifyOptions struct {
	// Keys and PerKey are the keys and the events of each key (default 8 and 8).
	Keys, PerKey int
	// Workers is the number of workers (default 3), Concurrency the handlers of each (default 4).
	Workers, Concurrency int
	// Lease is the workers' lease (default 500ms).
	Lease time.Duration
	// Payload makes an event's payload (default {"key":…,"seq":…}).
	Payload func(key string, seq int64) []byte
	// Timeout gives up a run that has not drained after this long (default 2 minutes).
	Timeout time.Duration
}

// VerifyReport is the outcome of a Verify run.
type VerifyReport struct {
	history.Report
	// Recorded says whether the handler recorded any effect (RecordEffect, RecordEffectTx);
	// if not, effects are not checked.
	Recorded bool
	// Missing counts done events without a recorded effect (when Recorded).
	Missing int
	// Terminations, Stalls and Restarts count the faults injected.
	Terminations, Stalls, Restarts int
}

// Clean reports whether the run kept every guarantee: nothing lost, no order inversion, no
// failure for good, and, when effects were recorded, exactly one per done event.
func (r *VerifyReport) Clean() bool {
	return r.Lost-r.Missing == 0 && r.OrderInversions == 0 && r.UnexpectedFailures == 0 &&
		r.DuplicateEffects == 0 && r.Missing == 0
}

// String is the report, one screen.
func (r *VerifyReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "faults: %d connection kills, %d stalls past the lease, %d worker restarts\n", r.Terminations, r.Stalls, r.Restarts)
	fmt.Fprintf(&b, "jobs: %d enqueued, %d completed, %d failed for good, %d lost, %d re-executions (allowed)\n",
		r.Enqueued, r.Completed, r.Failed, r.Lost-r.Missing, r.ReExecutions)
	if r.Recorded {
		fmt.Fprintf(&b, "effects: %d duplicate, %d missing\n", r.DuplicateEffects, r.Missing)
	} else {
		b.WriteString("effects: none recorded (RecordEffect); effects not checked\n")
	}
	fmt.Fprintf(&b, "order: %d inversions\n", r.OrderInversions)
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "  %s\n", p)
	}
	if r.Clean() {
		b.WriteString("verify: clean")
	} else {
		b.WriteString("verify: NOT CLEAN")
	}
	return b.String()
}

// recorderKey carries a Verify run's recorder in a handler's context.
type recorderKey struct{}

// RecordEffect records, in a Verify run, that the handler made job's effect: call it once per
// effect, when it took hold. It uses a connection of its own and ignores ctx's cancellation,
// so that a stale attempt's effect is recorded too. Outside a Verify run it does nothing.
func RecordEffect(ctx context.Context, job *ordered.Job) error {
	pool, ok := ctx.Value(recorderKey{}).(*pgxpool.Pool)
	if !ok {
		return nil
	}
	_, err := pool.Exec(context.WithoutCancel(ctx), verifyEffectSQL, job.Key, job.Seq, job.ClaimVersion)
	return err
}

// RecordEffectTx records job's effect in tx, the transaction of an ordered.TxHandlerFunc, so
// that it counts only if the completion commits. Outside a Verify run it does nothing.
func RecordEffectTx(ctx context.Context, tx pgx.Tx, job *ordered.Job) error {
	if _, ok := ctx.Value(recorderKey{}).(*pgxpool.Pool); !ok {
		return nil
	}
	_, err := tx.Exec(ctx, verifyEffectSQL, job.Key, job.Seq, job.ClaimVersion)
	return err
}

// Verify is the chaos run of `ordered verify`, in process, over h (an ordered.HandlerFunc or
// ordered.TxHandlerFunc): on a queue of its own (New), it enqueues Keys x PerKey events and
// runs several workers with h (policy block) while it injects the faults a process can inject
// on itself:
//
//   - connection kills: pg_terminate_backend of every connection of the workers;
//   - stalls past the lease: an attempt is paused before h runs, its lease is ended in the
//     database so that its renewal fails and another worker claims the job, and once that
//     attempt has started, the paused one runs h anyway, as a stale owner (its ctx done);
//   - worker restarts: a worker is stopped with StopAndCancel (its running handlers
//     cancelled) and a new one takes its place.
//
// It cannot kill its own process (kill -9), stop it with SIGSTOP or restart PostgreSQL:
// `ordered verify --exec` does, over a command. The handler records its effects with
// RecordEffect (or RecordEffectTx); Verify records each attempt's start itself. The history is
// checked with package history: no lost job, no failure for good, no event started before its
// key's previous one finished, and, when any effect was recorded, exactly one effect per done
// event in seq order per key. Any violation fails t with the report.
func Verify(t testing.TB, h ordered.Handler, o VerifyOptions) VerifyReport {
	t.Helper()
	o = o.withDefaults()
	q := New(t)
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	defer cancel()
	v := &verifyRun{t: t, o: o, q: q, h: h, fired: map[history.ID]bool{}, faults: make(chan string, len(verifyFaults))}
	rep, err := v.run(ctx)
	if err != nil {
		t.Fatalf("orderedtest.Verify: %v", err)
	}
	if !rep.Clean() {
		t.Errorf("orderedtest.Verify: the run is not clean:\n%s", rep.String())
	}
	return rep
}

func (o VerifyOptions) withDefaults() VerifyOptions {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Keys, 8)
	def(&o.PerKey, 8)
	def(&o.Workers, 3)
	def(&o.Concurrency, 4)
	if o.Lease <= 0 {
		o.Lease = 500 * time.Millisecond
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.Payload == nil {
		o.Payload = func(key string, seq int64) []byte {
			b, _ := json.Marshal(struct {
				Key string `json:"key"`
				Seq int64  `json:"seq"`
			}{key, seq})
			return b
		}
	}
	return o
}

// verifyRun is one Verify run.
type verifyRun struct {
	t  testing.TB
	o  VerifyOptions
	q  *Queue
	h  ordered.Handler
	mu sync.Mutex
	// fired are the events whose fault went off; faults takes each to the injector.
	fired  map[history.ID]bool
	faults chan string
	// stalls are the stalls under way.
	stalls   sync.WaitGroup
	workers  []*ordered.Worker
	pools    []*pgxpool.Pool
	enqueued []history.ID
	rep      VerifyReport
}

func (v *verifyRun) run(ctx context.Context) (VerifyReport, error) {
	if _, err := v.q.Pool.Exec(ctx, verifyTablesSQL); err != nil {
		return v.rep, err
	}
	if err := v.enqueue(ctx); err != nil {
		return v.rep, err
	}
	defer v.stopAll()
	for range v.o.Workers {
		if err := v.startWorker(ctx); err != nil {
			return v.rep, err
		}
	}
	if err := v.injectFaults(ctx); err != nil {
		return v.rep, err
	}
	v.stalls.Wait()
	v.stopAll()
	return v.check(ctx)
}

func (v *verifyRun) enqueue(ctx context.Context) error {
	var events []ordered.Event
	for k := range v.o.Keys {
		key := fmt.Sprintf("key-%03d", k)
		for s := range int64(v.o.PerKey) {
			events = append(events, ordered.Event{Key: key, Seq: s, Payload: v.o.Payload(key, s), MaxAttempts: ordered.MaxAttemptsDefault})
			v.enqueued = append(v.enqueued, history.ID{Key: key, Seq: s})
		}
	}
	c, err := ordered.NewClient(v.q.Pool, nil)
	if err != nil {
		return err
	}
	_, err = c.EnqueueMany(ctx, events)
	return err
}

// appName is the application_name of the run's workers: its own, so that runs in parallel do
// not kill each other's connections.
func (v *verifyRun) appName() string { return verifyAppName + v.q.Schema }

// startWorker starts a worker on a pool of its own, marked for the connection kills.
func (v *verifyRun) startWorker(ctx context.Context) error {
	u, err := url.Parse(v.q.URL)
	if err != nil {
		return err
	}
	qs := u.Query()
	qs.Set("application_name", v.appName())
	u.RawQuery = qs.Encode()
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		return err
	}
	v.pools = append(v.pools, pool)
	c, err := ordered.NewClient(pool, &ordered.Config{Lease: v.o.Lease, Policy: policy.Always(policy.Block),
		Logger:  slog.New(slog.DiscardHandler), // the faults make it loud; the report says what matters
		Backoff: policy.Exponential{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond}})
	if err != nil {
		return err
	}
	h, err := v.wrap(v.h)
	if err != nil {
		return err
	}
	w, err := c.NewWorker(h, &ordered.WorkerConfig{Workers: v.o.Concurrency, PollInterval: 50 * time.Millisecond,
		MaintenanceInterval: 200 * time.Millisecond})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	v.workers = append(v.workers, w)
	return nil
}

// wrap records each attempt's start, stalls it when a stall is due, and puts the recorder in
// its context, around h.
func (v *verifyRun) wrap(h ordered.Handler) (ordered.Handler, error) {
	before := func(ctx context.Context, job *ordered.Job) (context.Context, error) {
		if _, err := v.q.Pool.Exec(ctx, verifyStartSQL, job.Key, job.Seq, job.ClaimVersion); err != nil {
			return ctx, err
		}
		v.maybeStall(ctx, job)
		return context.WithValue(ctx, recorderKey{}, v.q.Pool), nil
	}
	switch f := h.(type) {
	case ordered.HandlerFunc:
		return ordered.HandlerFunc(func(ctx context.Context, job *ordered.Job) error {
			ctx, err := before(ctx, job)
			if err != nil {
				return err
			}
			return f(ctx, job)
		}), nil
	case ordered.TxHandlerFunc:
		return ordered.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, job *ordered.Job) error {
			ctx, err := before(ctx, job)
			if err != nil {
				return err
			}
			return f(ctx, tx, job)
		}), nil
	default:
		return nil, fmt.Errorf("orderedtest.Verify: handler %T is neither an ordered.HandlerFunc nor an ordered.TxHandlerFunc", h)
	}
}

// maybeStall sets off the fault of the attempt's event, if it has one and this is its first
// start. A stall is the attempt's own: it ends the attempt's lease, then waits until another
// attempt of the job started (or 10 leases passed), then lets it go on as a stale owner.
func (v *verifyRun) maybeStall(ctx context.Context, job *ordered.Job) {
	id := history.ID{Key: job.Key, Seq: job.Seq}
	v.mu.Lock()
	kind, ok := v.faultAt(id)
	first := ok && !v.fired[id]
	if first {
		v.fired[id] = true
		if kind == "stall" {
			v.stalls.Add(1)
		}
	}
	v.mu.Unlock()
	if !first {
		return
	}
	v.faults <- kind
	if kind != "stall" {
		return
	}
	defer v.stalls.Done()
	bg := context.WithoutCancel(ctx)
	if _, err := v.q.Pool.Exec(bg, verifyExpireSQL, job.ID, job.ClaimVersion); err != nil {
		return
	}
	v.mu.Lock()
	v.rep.Stalls++
	v.mu.Unlock()
	for deadline := time.Now().Add(10 * v.o.Lease); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var newer bool
		if err := v.q.Pool.QueryRow(bg, verifyNewerStartSQL, job.Key, job.Seq, job.ClaimVersion).Scan(&newer); err == nil && newer {
			return
		}
	}
}

// verifyFaults are the faults, each set off by the first start of an event: key k's event
// seq (as fractions of Keys and PerKey), so that every run meets each of them, however fast it
// goes.
var verifyFaults = []struct {
	key, seq float64
	kind     string
}{{0, 0.25, "terminate"}, {0.25, 0.4, "stall"}, {0.5, 0.5, "restart"}, {0.75, 0.6, "terminate"},
	{0.4, 0.75, "stall"}, {0.9, 0.75, "restart"}}

// faultAt is the fault that the first start of id sets off, if any.
func (v *verifyRun) faultAt(id history.ID) (string, bool) {
	for _, f := range verifyFaults {
		if id.Key == fmt.Sprintf("key-%03d", int(f.key*float64(v.o.Keys))) && id.Seq == int64(f.seq*float64(v.o.PerKey)) {
			return f.kind, true
		}
	}
	return "", false
}

// injectFaults injects the faults as their events start, until the run drains with every
// fault injected.
func (v *verifyRun) injectFaults(ctx context.Context) error {
	injected := 0
	for {
		var settled, pending int
		if err := v.q.Pool.QueryRow(ctx, verifyProgressSQL).Scan(&settled, &pending); err != nil {
			return fmt.Errorf("progress: %w", err)
		}
		if pending == 0 && injected == len(verifyFaults) {
			return nil
		}
		var kind string
		select {
		case <-ctx.Done():
			return fmt.Errorf("did not drain (%d jobs pending, %d of %d faults injected): %w",
				pending, injected, len(verifyFaults), context.Cause(ctx))
		case <-time.After(20 * time.Millisecond):
			continue
		case kind = <-v.faults:
		}
		injected++
		switch kind {
		case "terminate":
			var n int
			if err := v.q.Pool.QueryRow(ctx, verifyTerminateSQL, v.appName()).Scan(&n); err != nil {
				return err
			}
			v.rep.Terminations += n
		case "restart":
			i := injected % len(v.workers)
			if err := v.workers[i].StopAndCancel(ctx); err != nil {
				return fmt.Errorf("stop a worker: %w", err)
			}
			v.workers = append(v.workers[:i], v.workers[i+1:]...)
			if err := v.startWorker(ctx); err != nil {
				return err
			}
			v.rep.Restarts++
		}
	}
}

// stopAll stops the workers and closes their pools.
func (v *verifyRun) stopAll() {
	ctx := context.Background()
	for _, w := range v.workers {
		_ = w.StopAndCancel(ctx)
	}
	v.workers = nil
	for _, p := range v.pools {
		p.Close()
	}
	v.pools = nil
}

func (v *verifyRun) check(ctx context.Context) (VerifyReport, error) {
	h := history.History{Enqueued: v.enqueued}
	var err error
	if h.Jobs, err = Jobs(ctx, v.q.Pool); err != nil {
		return v.rep, err
	}
	rows, err := v.q.Pool.Query(ctx, verifyStartsSQL)
	if err != nil {
		return v.rep, err
	}
	if h.Starts, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (history.Start, error) {
		var s history.Start
		return s, r.Scan(&s.Key, &s.Seq, &s.ClaimVersion, &s.At)
	}); err != nil {
		return v.rep, err
	}
	rows, err = v.q.Pool.Query(ctx, verifyEffectsSQL)
	if err != nil {
		return v.rep, err
	}
	if h.Effects, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (history.Effect, error) {
		var e history.Effect
		return e, r.Scan(&e.Key, &e.Seq, &e.ClaimVersion, &e.Order)
	}); err != nil {
		return v.rep, err
	}
	v.mu.Lock()
	rep := v.rep
	v.mu.Unlock()
	rep.Report = history.Check(h)
	rep.Recorded = len(h.Effects) > 0
	have := make(map[history.ID]bool, len(h.Effects))
	for _, e := range h.Effects {
		have[e.ID] = true
	}
	missing := 0
	for _, j := range h.Jobs {
		if j.Status == "done" && !have[j.ID] {
			missing++
		}
	}
	if rep.Recorded {
		rep.Missing = missing
	} else {
		// No effect recorded: a done job is not lost for want of one.
		rep.Lost -= missing
		var kept []string
		for _, p := range rep.Problems {
			if !strings.HasSuffix(p, "is done but its effect is missing") {
				kept = append(kept, p)
			}
		}
		rep.Problems = kept
	}
	if rep.Lost < rep.Missing {
		return rep, errors.New("orderedtest.Verify: inconsistent history")
	}
	return rep, nil
}
