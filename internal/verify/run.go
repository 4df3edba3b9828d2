package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderedq/ordered/internal/harness"
	"github.com/orderedq/ordered/internal/pgcluster"
	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/history"
	"github.com/orderedq/ordered/policy"
)

// appName marks the workers' connections, the targets of the connection faults.
const appName = "ordered-verify-worker"

// run is one run of the chaos run: a policy and a kind of handler, in a schema of its own.
type run struct {
	o             Options
	cluster       *pgcluster.Cluster
	policy        string
	transactional bool
	rng           *rand.Rand

	pool      *pgxpool.Pool
	schema    string
	workerURL string
	procs     []*workerProc
	// enqueued are the run's events, expected the poison ones among them.
	enqueued, expected []history.ID
	// gapFill are the events of the contiguous keys held back until the workers run, so
	// that those keys wait on gaps while they are filled in random order (see enqueue).
	gapFill []ordered.Event
	kills   []kill
	// brokenMidway are the invariants the rows broke at a check while the run was under way
	// (checkInvariants), each with when.
	brokenMidway []string
	res          result
	// command, when set, is the user's command the workers run, and effects the file it
	// records its effects in (see RunExec).
	command, effects string
	// spawned counts the worker processes started: in at-least-once runs every other one is
	// a batch worker (batchSize).
	spawned int
}

// batchSize is the BatchSize of the chaos run's batch workers: small, so that batches end
// often at flaky jobs and key boundaries, and crash in the middle.
const batchSize = 8

// runOne is one run against a fresh schema of the cluster.
func runOne(ctx context.Context, cluster *pgcluster.Cluster, o Options, pol string, transactional bool) (result, error) {
	kind := "at-least-once"
	if transactional {
		kind = "transactional"
	}
	r := &run{o: o, cluster: cluster, policy: pol, transactional: transactional,
		rng: rand.New(rand.NewPCG(uint64(len(pol)), 11)),
		res: result{name: pol + "/" + kind, transactional: transactional}}
	start := time.Now()
	if err := r.setup(ctx, fmt.Sprintf("verify_%s_%s", pol, strings.ReplaceAll(kind, "-", "_"))); err != nil {
		return r.res, err
	}
	defer r.pool.Close()
	if err := r.enqueue(ctx); err != nil {
		return r.res, err
	}
	defer r.killWorkers()
	if err := r.startWorkers(ctx); err != nil {
		return r.res, err
	}
	if err := r.enqueueGapFill(ctx); err != nil {
		return r.res, err
	}
	if err := r.injectFaults(ctx); err != nil {
		return r.res, err
	}
	for _, p := range r.procs {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	if err := r.check(ctx); err != nil {
		return r.res, err
	}
	r.res.elapsed = time.Since(start)
	return r.res, nil
}

// setup creates the run's schema, migrates it and creates the tables of the history.
func (r *run) setup(ctx context.Context, name string) error {
	s, err := harness.CreateSchema(ctx, r.cluster.URL(), name)
	if err != nil {
		return err
	}
	r.schema, r.workerURL = s.Name, withAppName(s.BaseURL, appName)
	if r.pool, err = s.MigratedPool(ctx, 4); err != nil {
		return err
	}
	if _, err := r.pool.Exec(ctx, tablesSQL); err != nil {
		r.pool.Close()
		return err
	}
	return nil
}

// enqueue enqueues the workload: flaky events here and there, one poison event.
func (r *run) enqueue(ctx context.Context) error {
	var events []ordered.Event
	for k := range r.o.Keys {
		key := fmt.Sprintf("key-%03d", k)
		for s := range r.o.PerKey {
			p := harness.Script{}
			if r.rng.IntN(100) < 5 {
				p.FailAttempts = 1
			}
			if k == r.o.Keys/2 && s == r.o.PerKey/3 {
				p = harness.Script{Poison: true}
				r.expected = append(r.expected, history.ID{Key: key, Seq: int64(s)})
			}
			body, _ := json.Marshal(p)
			events = append(events, ordered.Event{Key: key, Seq: int64(s), Payload: body, MaxAttempts: 10})
			r.enqueued = append(r.enqueued, history.ID{Key: key, Seq: int64(s)})
		}
	}
	client, err := ordered.NewClient(r.pool, nil)
	if err != nil {
		return err
	}
	if _, err = client.EnqueueMany(ctx, events); err != nil {
		return err
	}
	return r.enqueueGapped(ctx)
}

// gapKeys is how many contiguous keys a run has, beside its o.Keys keys.
func (r *run) gapKeys() int { return max(2, r.o.Keys/10) }

// contiguousClient enqueues into contiguous keys from seq 0 whose gaps wait.
func (r *run) contiguousClient() (*ordered.Client, error) {
	return ordered.NewClient(r.pool, &ordered.Config{
		Sequence: policy.AllKeys(policy.Sequence{Contiguous: true}),
	})
}

// enqueueGapped enqueues the odd seqs of the contiguous keys, shuffled, and keeps the even
// ones for enqueueGapFill: until those arrive, each key waits on a gap at its next seq.
func (r *run) enqueueGapped(ctx context.Context) error {
	var odd []ordered.Event
	for k := range r.gapKeys() {
		key := fmt.Sprintf("gap-%03d", k)
		for s := range r.o.PerKey {
			p := harness.Script{}
			if r.rng.IntN(100) < 5 {
				p.FailAttempts = 1
			}
			body, _ := json.Marshal(p)
			ev := ordered.Event{Key: key, Seq: int64(s), Payload: body, MaxAttempts: 10}
			if s%2 == 1 {
				odd = append(odd, ev)
			} else {
				r.gapFill = append(r.gapFill, ev)
			}
			r.enqueued = append(r.enqueued, history.ID{Key: key, Seq: int64(s)})
		}
	}
	r.rng.Shuffle(len(odd), func(i, j int) { odd[i], odd[j] = odd[j], odd[i] })
	r.rng.Shuffle(len(r.gapFill), func(i, j int) { r.gapFill[i], r.gapFill[j] = r.gapFill[j], r.gapFill[i] })
	client, err := r.contiguousClient()
	if err != nil {
		return err
	}
	_, err = client.EnqueueMany(ctx, odd)
	return err
}

// enqueueGapFill enqueues the held-back seqs of the contiguous keys in random order, a few at
// a time, while the workers run: none may be refused as late, and each key must run in seq
// order (the history check).
func (r *run) enqueueGapFill(ctx context.Context) error {
	client, err := r.contiguousClient()
	if err != nil {
		return err
	}
	for lo := 0; lo < len(r.gapFill); lo += 3 {
		if _, err := client.EnqueueMany(ctx, r.gapFill[lo:min(lo+3, len(r.gapFill))]); err != nil {
			return fmt.Errorf("enqueue into contiguous keys: %w", err)
		}
	}
	return nil
}

// workerProc is a worker process of the run.
type workerProc struct {
	*harness.Child
	// stderr holds the end of its standard error (nil: not kept).
	stderr *tail
	// ready is closed once its worker has started (nil: not watched; see waitReady).
	ready <-chan struct{}
}

// watch waits for cmd's exit in the background; cmd must not be waited for elsewhere.
func watch(cmd *exec.Cmd, stderr *tail) *workerProc {
	return &workerProc{Child: harness.Watch(cmd), stderr: stderr}
}

// ReadyLine is the line a worker process writes on its standard output once its worker has
// started (WorkerCommand must write it).
const ReadyLine = "ordered verify-worker: started"

// readiness is a worker process's standard output: it closes ready when ReadyLine has been
// written, and drops the rest. The output of the commands in the --exec runs shares it: a line
// that ends with ReadyLine counts, as a command may have left its last line unfinished.
type readiness struct {
	ready chan struct{}

	mu   sync.Mutex
	seen bool   // ReadyLine was written
	line []byte // the end of the current line, at most len(ReadyLine) bytes
}

func newReadiness() *readiness { return &readiness{ready: make(chan struct{})} }

func (w *readiness) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range p {
		if w.seen {
			break
		}
		if b != '\n' {
			if len(w.line) == len(ReadyLine) {
				w.line = append(w.line[:0], w.line[1:]...)
			}
			w.line = append(w.line, b)
			continue
		}
		if string(w.line) == ReadyLine {
			w.seen = true
			close(w.ready)
		}
		w.line = w.line[:0]
	}
	return len(p), nil
}

// waitReady waits until each of procs has started its worker. Faults are for running
// workers: a worker that a PostgreSQL restart meets as it starts may find nothing listening
// (connection refused) and exit, as a worker should when its database is not there.
func (r *run) waitReady(ctx context.Context, procs ...*workerProc) error {
	deadline := time.After(r.o.Timeout)
	for _, p := range procs {
		select {
		case <-p.ready:
		case <-p.Exited():
			return r.anyExited()
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-deadline:
			return fmt.Errorf("worker process %d did not start within %s", p.Process.Pid, r.o.Timeout)
		}
	}
	return nil
}

// tail keeps the last tailMax bytes written to it.
type tail struct {
	mu sync.Mutex
	b  []byte
}

const tailMax = 4 << 10

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > tailMax {
		t.b = append(t.b[:0:0], t.b[len(t.b)-tailMax:]...)
	}
	return len(p), nil
}

// lastLine is the last line written, without its line break ("" if none).
func (t *tail) lastLine() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	text := strings.TrimRight(string(t.b), "\n")
	return text[strings.LastIndexByte(text, '\n')+1:]
}

// anyExited returns an error for the first worker that has exited: the run stops or kills
// its workers itself (a killed one is replaced at once), so one that ends on its own did not
// survive what the run did to it.
func (r *run) anyExited() error {
	for _, p := range r.procs {
		how, exited := p.HasExited()
		if !exited {
			continue
		}
		if p.stderr != nil && p.stderr.lastLine() != "" {
			how += "; its last words: " + p.stderr.lastLine()
		}
		return fmt.Errorf("worker process %d ended on its own (%s)", p.Process.Pid, how)
	}
	return nil
}

// spawn starts a worker process.
func (r *run) spawn() (*workerProc, error) {
	args := r.workerArgs(r.workerURL)
	if !r.transactional && r.command == "" && r.spawned%2 == 1 {
		args = append(args, "--batch", strconv.Itoa(batchSize))
	}
	r.spawned++
	stderr, stdout := &tail{}, newReadiness()
	cmd, err := harness.SpawnSelf(stdout, stderr, args...)
	if err != nil {
		return nil, err
	}
	p := watch(cmd, stderr)
	p.ready = stdout.ready
	return p, nil
}

// workerArgs are the arguments of a worker process that connects to url.
func (r *run) workerArgs(url string) []string {
	args := []string{WorkerCommand, "--database-url", url, "--schema", r.schema, "--policy", r.policy,
		"--workers", strconv.Itoa(r.o.Workers), "--lease", r.o.Lease.String(), "--work", r.o.Work.String()}
	if r.transactional {
		args = append(args, "--transactional")
	}
	if r.command != "" {
		args = append(args, "--exec", r.command, "--effects", r.effects)
	}
	return args
}

// startWorkers starts the worker processes and, outside the hosts mode, waits until each
// has started its worker.
func (r *run) startWorkers(ctx context.Context) error {
	if r.o.hosts != nil {
		return r.startHostWorkers()
	}
	r.procs = make([]*workerProc, r.o.Processes)
	for i := range r.procs {
		p, err := r.spawn()
		if err != nil {
			r.procs = r.procs[:i]
			return err
		}
		r.procs[i] = p
	}
	return r.waitReady(ctx, r.procs...)
}

// killWorkers kills the workers, stalled ones too, and waits for them.
func (r *run) killWorkers() {
	for _, p := range r.procs {
		_ = p.Process.Signal(syscall.SIGCONT)
		_ = p.Process.Kill()
		<-p.Exited()
	}
}

// check reads the run's history and checks it.
func (r *run) check(ctx context.Context) error {
	h, err := readHistory(ctx, r.pool, r.enqueued, r.expected)
	if err != nil {
		return err
	}
	r.res.report = history.Check(h)
	if r.res.broken, err = r.brokenInvariants(ctx); err != nil {
		return err
	}
	if r.res.maxRecovery, err = maxRecovery(ctx, r.pool, r.kills); err != nil || r.o.hosts == nil {
		return err
	}
	return r.checkPartitions(ctx)
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
