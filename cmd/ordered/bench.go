package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/spf13/cobra"

	"github.com/orderedq/ordered/ordered"
)

// benchSizes are the sizes of one bench run; --quick divides the big ones.
type benchSizes struct {
	ceilingTime      time.Duration
	manyKeys, many   int // (a) jobs over keys
	orderedKeys, per int // (b) keys × jobs per key
	serial           int // (c) one key
	hotSmall, hotBig int // hot-key backlogs
	hotOthers        int
	deepJobs, deepKs int
	deepTime         time.Duration
	bulk             int
	singleTime       time.Duration
	wakeSamples      int
	churn            time.Duration
	churnRate        int // events/s
	concurrency      []int
	// handlers are the throughput runs' handler counts: the concurrency, and more, since a
	// worker's batches (one commit each) can be no larger than its handlers.
	handlers []int
}

var benchFull = benchSizes{
	ceilingTime: 10 * time.Second,
	manyKeys:    10_000, many: 50_000,
	orderedKeys: 1_000, per: 50,
	serial:   5_000,
	hotSmall: 1_000, hotBig: 1_000_000, hotOthers: 1_000,
	deepJobs: 1_000_000, deepKs: 100_000, deepTime: 10 * time.Second,
	bulk:        100_000,
	singleTime:  5 * time.Second,
	wakeSamples: 100,
	churn:       5 * time.Minute, churnRate: 500,
	concurrency: []int{8, 64},
	handlers:    []int{8, 64, 1000},
}

var benchQuick = benchSizes{
	ceilingTime: time.Second,
	manyKeys:    500, many: 2_000,
	orderedKeys: 50, per: 40,
	serial:   300,
	hotSmall: 1_000, hotBig: 20_000, hotOthers: 200,
	deepJobs: 20_000, deepKs: 2_000, deepTime: time.Second,
	bulk:        20_000,
	singleTime:  time.Second,
	wakeSamples: 20,
	churn:       4 * time.Second, churnRate: 500,
	concurrency: []int{8},
	handlers:    []int{8, 64},
}

// sizeFlag is one size of a bench run as a command-line flag.
type sizeFlag struct {
	name, usage string
	value       any // *int, *time.Duration or *[]int into a benchSizes
}

// sizeFlags lists the flags of the sizes in s, in the same order for any s.
func sizeFlags(s *benchSizes) []sizeFlag {
	return []sizeFlag{
		{"ceiling-time", "length of each ceiling measurement", &s.ceilingTime},
		{"ceiling-clients", "ceiling concurrencies (the largest is the ratios' yardstick)", &s.concurrency},
		{"many-jobs", "throughput (a): jobs", &s.many},
		{"many-keys", "throughput (a): keys", &s.manyKeys},
		{"ordered-keys", "throughput (b): keys", &s.orderedKeys},
		{"per-key", "throughput (b): jobs per key", &s.per},
		{"serial-jobs", "throughput (c): jobs of the one key", &s.serial},
		{"handlers", "throughput: handler counts, one drain each", &s.handlers},
		{"hot-small", "hot key: the small backlog", &s.hotSmall},
		{"hot-big", "hot key: the big backlog", &s.hotBig},
		{"hot-others", "hot key: other keys drained, one job each", &s.hotOthers},
		{"deep-jobs", "deep backlog: queued jobs", &s.deepJobs},
		{"deep-keys", "deep backlog: keys", &s.deepKs},
		{"deep-time", "deep backlog: length of the measurement", &s.deepTime},
		{"bulk-events", "bulk enqueue: events", &s.bulk},
		{"single-time", "single-event enqueue: length of the measurement", &s.singleTime},
		{"wake-samples", "wake-up: samples of each mode", &s.wakeSamples},
		{"churn-rate", "churn: events/s", &s.churnRate},
		{"duration", "churn: length of the run", &s.churn},
	}
}

// registerSizeFlags gives cmd a flag for each size, writing into sizes, with sizes' values as
// the defaults.
func registerSizeFlags(cmd *cobra.Command, sizes *benchSizes) {
	f := cmd.Flags()
	for _, fl := range sizeFlags(sizes) {
		switch v := fl.value.(type) {
		case *int:
			f.IntVar(v, fl.name, *v, fl.usage)
		case *time.Duration:
			f.DurationVar(v, fl.name, *v, fl.usage)
		case *[]int:
			f.IntSliceVar(v, fl.name, *v, fl.usage)
		}
	}
}

// applySizeFlags copies into base the sizes whose flags were set, and checks that each is
// positive.
func applySizeFlags(base *benchSizes, set *benchSizes, changed func(name string) bool) error {
	into := sizeFlags(base)
	for i, fl := range sizeFlags(set) {
		if !changed(fl.name) {
			continue
		}
		switch v := fl.value.(type) {
		case *int:
			if *v <= 0 {
				return fmt.Errorf("--%s must be positive, got %d", fl.name, *v)
			}
			*into[i].value.(*int) = *v
		case *time.Duration:
			if *v <= 0 {
				return fmt.Errorf("--%s must be positive, got %s", fl.name, *v)
			}
			*into[i].value.(*time.Duration) = *v
		case *[]int:
			if len(*v) == 0 || slices.Min(*v) <= 0 {
				return fmt.Errorf("--%s must list positive numbers, got %v", fl.name, *v)
			}
			*into[i].value.(*[]int) = slices.Clone(*v)
		}
	}
	return nil
}

// benchFigure is one line of the bench table.
type benchFigure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	// Ratio is Value over the commit ceiling measured in the same run, for rates.
	Ratio *float64 `json:"ratio_to_ceiling,omitempty"`
	Note  string   `json:"note,omitempty"`
}

type bench struct {
	*app
	sizes   benchSizes
	baseURL string
	ceiling float64
	figures []benchFigure
	jsonOut bool
}

func (a *app) benchCmd() *cobra.Command {
	var (
		quick   bool
		asJSON  bool
		only    []string
		profile string
		sizes   = benchFull // the size flags write here; see applySizeFlags
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "The benchmark suite: throughput, hot-key flatness, deep backlog, enqueue, wake-up and churn, against this machine's commit ceiling",
		Long: `Bench measures, in one run on this machine, against --database-url or DATABASE_URL (else the
server on 127.0.0.1:5432, else a private cluster), each scenario in a fresh schema:

  ceiling      single-row UPDATE commits/s at each concurrency (the yardstick for the ratios)
  throughput   enqueue then drain with a no-op handler: (a) 50,000 jobs over 10,000 keys,
               (b) 1,000 keys x 50, (c) one key x 5,000, with 8, 64 and 1,000 handlers
  hot key      other keys' drain rate with one key holding 1,000 vs 1,000,000 queued jobs
               behind a running head (flat means ratio >= 0.9)
  deep         claim latency p50/p99 and jobs/s with 1,000,000 jobs queued over 100,000 keys
  enqueue      bulk (batches of 10,000) and single-event (8 producers) enqueue rates
  wake-up      enqueue -> handler start, p50/p99, with LISTEN/NOTIFY and poll-only
  churn        --duration of steady enqueue+drain: claim latency, dead tuples and table size
               over time, with archival and the shipped autovacuum settings

Every size is a flag (--many-jobs, --per-key, --hot-big, --handlers 8,64,1000, ...); the
defaults shown are the full run's, and a size flag given with --quick overrides that one size
of the quick set.
--quick shrinks every size to finish in about a minute (a smoke test, not a measurement).
The full run takes 10 to 15 minutes, most of it loading the million-job backlogs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := &bench{app: a, sizes: benchFull}
			if quick {
				b.sizes = benchQuick
			}
			if err := applySizeFlags(&b.sizes, &sizes, cmd.Flags().Changed); err != nil {
				return err
			}
			if profile != "" {
				f, err := os.Create(profile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			return b.run(cmd.Context(), asJSON, only)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&quick, "quick", false, "small sizes, about a minute (smoke test)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	registerSizeFlags(cmd, &sizes)
	f.StringVar(&profile, "cpuprofile", "", "write a CPU profile of the bench process to this file")
	f.StringSliceVar(&only, "only", nil, "run only these scenarios (the ceiling always runs): "+strings.Join(benchScenarioNames, ","))
	return cmd
}

func (b *bench) add(name string, value float64, unit string, rate bool, note string) {
	f := benchFigure{Name: name, Value: value, Unit: unit, Note: note}
	if rate && b.ceiling > 0 {
		r := value / b.ceiling
		f.Ratio = &r
	}
	b.figures = append(b.figures, f)
	if !b.jsonOut {
		fmt.Fprintf(b.stderr, "bench: %s: %.1f %s\n", name, value, unit)
	}
}

// benchScenarioNames are the scenarios of a run, in order; the ceiling comes first, always.
var benchScenarioNames = []string{"throughput", "hotkey", "deep", "enqueue", "wakeup", "churn"}

func (b *bench) run(ctx context.Context, asJSON bool, only []string) error {
	b.jsonOut = asJSON
	scenarios := map[string]func(context.Context) error{
		"throughput": b.benchThroughput, "hotkey": b.benchHotKey, "deep": b.benchDeep,
		"enqueue": b.benchEnqueue, "wakeup": b.benchWakeup, "churn": b.benchChurn,
	}
	for _, name := range only {
		if scenarios[name] == nil {
			return fmt.Errorf("bench: unknown scenario %q (known: %s)", name, strings.Join(benchScenarioNames, ", "))
		}
	}
	d := &demo{app: b.app}
	cleanup, err := d.database(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	b.baseURL = d.baseURL

	if err := b.benchCeiling(ctx); err != nil {
		return err
	}
	for _, name := range benchScenarioNames {
		if len(only) > 0 && !slices.Contains(only, name) {
			continue
		}
		if err := scenarios[name](ctx); err != nil {
			return err
		}
	}
	if asJSON {
		return writeJSON(b.app, b.figures)
	}
	tw := tabwriter.NewWriter(b.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tvalue\tunit\tvs ceiling\tnote")
	for _, f := range b.figures {
		ratio := ""
		if f.Ratio != nil {
			ratio = fmt.Sprintf("%.2fx", *f.Ratio)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", f.Name, formatValue(f.Value), f.Unit, ratio, f.Note)
	}
	return tw.Flush()
}

func formatValue(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// queue is a fresh migrated schema for one scenario.
type benchQueue struct {
	pool   *pgxpool.Pool
	client *ordered.Client
	drop   func()
}

func (b *bench) queue(ctx context.Context, maxConns int32, cfg *ordered.Config) (*benchQueue, error) {
	d := &demo{app: b.app, baseURL: b.baseURL}
	if err := d.setup(ctx); err != nil {
		return nil, err
	}
	d.pool.Close()
	pcfg, err := pgxpool.ParseConfig(d.url)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	client, err := ordered.NewClient(pool, cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &benchQueue{pool: pool, client: client, drop: func() {
		pool.Close()
		d.pool = nil
		d.teardown()
	}}, nil
}

// load enqueues n events over keys (seqs from 0 per key) in batches of 10,000, round robin
// over keys so that every batch touches many keys.
func load(ctx context.Context, c *ordered.Client, n, keys int, keyName func(int) string) error {
	payload := json.RawMessage(`{"amount_cents":1234,"currency":"EUR"}`)
	for lo := 0; lo < n; lo += 10_000 {
		batch := make([]ordered.Event, 0, min(10_000, n-lo))
		for i := lo; i < min(lo+10_000, n); i++ {
			batch = append(batch, ordered.Event{Key: keyName(i % keys), Seq: int64(i / keys), Payload: payload})
		}
		if _, err := c.EnqueueMany(ctx, batch); err != nil {
			return err
		}
	}
	return nil
}

func keyName(i int) string { return fmt.Sprintf("key-%06d", i) }

// benchCeiling measures single-row UPDATE commits/s at the largest bench concurrency.
func (b *bench) benchCeiling(ctx context.Context) error {
	for _, c := range b.sizes.concurrency {
		q, err := b.queue(ctx, int32(c), nil)
		if err != nil {
			return err
		}
		if _, err := q.pool.Exec(ctx, `CREATE TABLE bench_ceiling (id int PRIMARY KEY, v int NOT NULL);
			INSERT INTO bench_ceiling SELECT g, 0 FROM generate_series(1, 100000) AS g`); err != nil {
			q.drop()
			return err
		}
		var commits atomic.Int64
		ctx2, cancel := context.WithTimeout(ctx, b.sizes.ceilingTime)
		var wg sync.WaitGroup
		for range c {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx2.Err() == nil {
					if _, err := q.pool.Exec(ctx2, `UPDATE bench_ceiling SET v = v + 1 WHERE id = $1`, 1+rand.IntN(100_000)); err == nil {
						commits.Add(1)
					}
				}
			}()
		}
		start := time.Now()
		wg.Wait()
		cancel()
		rate := float64(commits.Load()) / time.Since(start).Seconds()
		if c == slices.Max(b.sizes.concurrency) || b.ceiling == 0 {
			b.ceiling = max(b.ceiling, rate)
		}
		b.add(fmt.Sprintf("ceiling: single-row UPDATE commits, %d clients", c), rate, "commits/s", false, "")
		q.drop()
	}
	return nil
}

// drain runs a worker with a no-op handler until want jobs completed; it returns jobs/s and
// the completion latency (handler return to completion committed) p50 and p99 in ms.
func (b *bench) drain(ctx context.Context, q *benchQueue, handlers, want int) (rate, p50, p99 float64, err error) {
	reg := prometheus.NewRegistry()
	w, err := q.client.NewWorker(ordered.HandlerFunc(func(context.Context, *ordered.Job) error { return nil }),
		&ordered.WorkerConfig{Workers: handlers, PollInterval: 50 * time.Millisecond, Registerer: reg, Retention: -1})
	if err != nil {
		return 0, 0, 0, err
	}
	start := time.Now()
	if err := w.Start(ctx); err != nil {
		return 0, 0, 0, err
	}
	defer w.StopAndCancel(context.WithoutCancel(ctx)) //nolint:errcheck
	for counterValue(reg, "ordered_completions_total") < float64(want) {
		if ctx.Err() != nil {
			return 0, 0, 0, ctx.Err()
		}
		time.Sleep(5 * time.Millisecond)
	}
	rate = float64(want) / time.Since(start).Seconds()
	completions := histogramOf(reg, "ordered_completion_duration_seconds")
	return rate, bucketQuantile(nil, completions, 0.5) * 1000, bucketQuantile(nil, completions, 0.99) * 1000, nil
}

func counterValue(reg *prometheus.Registry, name string) float64 {
	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func histogramOf(reg *prometheus.Registry, name string) *dto.Histogram {
	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				return m.GetHistogram()
			}
		}
	}
	return nil
}

func (b *bench) benchThroughput(ctx context.Context) error {
	s := b.sizes
	shapes := []struct {
		name      string
		jobs      int
		keys      int
		keyPrefix string
	}{
		{fmt.Sprintf("(a) %d jobs over %d keys", s.many, s.manyKeys), s.many, s.manyKeys, "key"},
		{fmt.Sprintf("(b) %d keys x %d jobs", s.orderedKeys, s.per), s.orderedKeys * s.per, s.orderedKeys, "key"},
		{fmt.Sprintf("(c) one key x %d jobs", s.serial), s.serial, 1, "key"},
	}
	for _, shape := range shapes {
		for _, h := range s.handlers {
			q, err := b.queue(ctx, int32(min(h, 64)+8), nil)
			if err != nil {
				return err
			}
			if err := load(ctx, q.client, shape.jobs, shape.keys, keyName); err != nil {
				q.drop()
				return err
			}
			_, _ = q.pool.Exec(ctx, "ANALYZE ordered_jobs, ordered_keys")
			rate, p50, p99, err := b.drain(ctx, q, h, shape.jobs)
			q.drop()
			if err != nil {
				return err
			}
			b.add(fmt.Sprintf("throughput %s, %d handlers", shape.name, h), rate, "jobs/s", true,
				fmt.Sprintf("completion latency p50 <= %s ms, p99 <= %s ms", formatValue(p50), formatValue(p99)))
		}
	}
	return nil
}

// benchHotKey drains the other keys with a small and a big backlog on one key behind a
// running head. A drain of 1,000 jobs lasts 40 to 100 ms, so each backlog is measured in
// hotRounds drains of fresh other keys by one running worker, each timed from the
// commit of the others' one enqueue batch to their last completion committed (a worker's
// start-up is in neither), and the median is kept. Both queues stand side by side and their
// drains alternate, so a shared machine's drift falls on both alike.
func (b *bench) benchHotKey(ctx context.Context) error {
	s := b.sizes
	backlogs := []int{s.hotSmall, s.hotBig}
	queues := make([]*hotQueue, len(backlogs))
	for i, backlog := range backlogs {
		h, err := b.newHotQueue(ctx, backlog)
		if err != nil {
			return err
		}
		defer h.close(context.WithoutCancel(ctx))
		queues[i] = h
	}
	rates := make([][]float64, len(backlogs))
	for round := range hotRounds {
		for n := range queues {
			i := (round + n) % len(queues) // who goes first alternates too
			rate, err := queues[i].drain(ctx, round)
			if err != nil {
				return err
			}
			rates[i] = append(rates[i], rate)
		}
	}
	medians := make([]float64, len(backlogs))
	for i, backlog := range backlogs {
		slices.Sort(rates[i])
		medians[i] = rates[i][len(rates[i])/2]
		b.add(fmt.Sprintf("hot key: %d other keys drained, hot backlog %d", s.hotOthers, backlog), medians[i], "jobs/s", true,
			fmt.Sprintf("median of %d drains, alternating", hotRounds))
	}
	b.add(fmt.Sprintf("hot-key flatness (backlog %d vs %d)", s.hotBig, s.hotSmall), medians[1]/medians[0], "ratio", false, "target >= 0.9")
	return nil
}

// hotRounds is how many drains of each backlog the hot-key median is taken over: a drain
// lasts tens of milliseconds, at the mercy of the machine's noise.
const hotRounds = 25

// hotQueue is a queue whose hot key holds a backlog behind a running head, with a worker that
// drains the other keys as they come.
type hotQueue struct {
	q       *benchQueue
	w       *ordered.Worker
	reg     *prometheus.Registry
	others  int
	handled atomic.Int64
	target  atomic.Int64
	drained chan struct{}
}

func (b *bench) newHotQueue(ctx context.Context, backlog int) (_ *hotQueue, err error) {
	q, err := b.queue(ctx, 72, &ordered.Config{Lease: time.Hour})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			q.drop()
		}
	}()
	if err := load(ctx, q.client, backlog+1, 1, func(int) string { return "hot" }); err != nil {
		return nil, err
	}
	// The hot key's head is taken and never settled: its backlog waits behind it.
	if _, err := q.client.Claim(ctx, 1); err != nil {
		return nil, err
	}
	h := &hotQueue{q: q, reg: prometheus.NewRegistry(), others: b.sizes.hotOthers, drained: make(chan struct{}, 1)}
	h.w, err = q.client.NewWorker(ordered.HandlerFunc(func(context.Context, *ordered.Job) error {
		if h.handled.Add(1) == h.target.Load() {
			h.drained <- struct{}{}
		}
		return nil
	}), &ordered.WorkerConfig{Workers: 64, PollInterval: 50 * time.Millisecond, Registerer: h.reg, Retention: -1})
	if err != nil {
		return nil, err
	}
	if err := h.w.Start(ctx); err != nil {
		return nil, err
	}
	return h, nil
}

// drain enqueues the round's other keys, one job each, and returns their drain rate.
func (h *hotQueue) drain(ctx context.Context, round int) (float64, error) {
	// The table is vacuumed, analyzed and checkpointed first: the backlog's load would
	// otherwise leave a checkpoint running through the first drains.
	_, _ = h.q.pool.Exec(ctx, "VACUUM ANALYZE ordered_jobs, ordered_keys")
	_, _ = h.q.pool.Exec(ctx, "CHECKPOINT")

	h.target.Store(int64((round + 1) * h.others))
	others := make([]ordered.Event, h.others)
	for i := range others {
		others[i] = ordered.Event{Key: fmt.Sprintf("other-%d-%05d", round, i), Payload: json.RawMessage(`{}`)}
	}
	if _, err := h.q.client.EnqueueMany(ctx, others); err != nil {
		return 0, err
	}
	start := time.Now()
	select {
	case <-h.drained:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	// The last handler has been called; its completion commits with the next batch.
	for counterValue(h.reg, "ordered_completions_total") < float64(h.target.Load()) {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		time.Sleep(100 * time.Microsecond)
	}
	return float64(h.others) / time.Since(start).Seconds(), nil
}

func (h *hotQueue) close(ctx context.Context) {
	_ = h.w.StopAndCancel(ctx)
	h.q.drop()
}

// benchDeep claims from a deep backlog with 8 claimers, measuring each claim.
func (b *bench) benchDeep(ctx context.Context) error {
	s := b.sizes
	q, err := b.queue(ctx, 16, nil)
	if err != nil {
		return err
	}
	defer q.drop()
	if err := load(ctx, q.client, s.deepJobs, s.deepKs, keyName); err != nil {
		return err
	}
	// As for the hot key: the claims are measured, not the checkpoint the load set off.
	_, _ = q.pool.Exec(ctx, "VACUUM ANALYZE ordered_jobs, ordered_keys")
	_, _ = q.pool.Exec(ctx, "CHECKPOINT")
	var mu sync.Mutex
	var lat []time.Duration
	var done atomic.Int64
	ctx2, cancel := context.WithTimeout(ctx, s.deepTime)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx2.Err() == nil {
				t := time.Now()
				jobs, err := q.client.Claim(ctx2, 1)
				if err != nil || len(jobs) == 0 {
					continue
				}
				d := time.Since(t)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
				if q.client.Complete(ctx, jobs[0]) == nil {
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lat)
	name := fmt.Sprintf("deep backlog (%d jobs over %d keys)", s.deepJobs, s.deepKs)
	b.add(name+": claim p50", ms(percentile(lat, 0.50)), "ms", false, "")
	b.add(name+": claim p99", ms(percentile(lat, 0.99)), "ms", false, "target < 10 ms")
	b.add(name+": 8 claimers, claim+complete", float64(done.Load())/elapsed.Seconds(), "jobs/s", true, "")
	return nil
}

func (b *bench) benchEnqueue(ctx context.Context) error {
	s := b.sizes
	q, err := b.queue(ctx, 16, nil)
	if err != nil {
		return err
	}
	defer q.drop()
	start := time.Now()
	if err := load(ctx, q.client, s.bulk, 1_000, keyName); err != nil {
		return err
	}
	b.add("bulk enqueue (batches of 10,000)", float64(s.bulk)/time.Since(start).Seconds(), "events/s", true, "")
	// Autovacuum would analyze the table after the load (it is set to, every 5,000 changed
	// rows); without statistics each single enqueue costs twice as much, growing with the table.
	_, _ = q.pool.Exec(ctx, "ANALYZE ordered_jobs, ordered_keys")

	var n atomic.Int64
	ctx2, cancel := context.WithTimeout(ctx, s.singleTime)
	defer cancel()
	var wg sync.WaitGroup
	start = time.Now()
	for p := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int64(0); ctx2.Err() == nil; i++ {
				if _, err := q.client.Enqueue(ctx2, ordered.Event{Key: fmt.Sprintf("single-%d-%d", p, i%100), Seq: i}); err == nil {
					n.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	b.add("single-event enqueue, 8 producers", float64(n.Load())/time.Since(start).Seconds(), "events/s", true, "")
	return nil
}

// benchWakeup enqueues into an idle worker and measures enqueue -> handler start.
func (b *bench) benchWakeup(ctx context.Context) error {
	for _, pollOnly := range []bool{false, true} {
		q, err := b.queue(ctx, 8, nil)
		if err != nil {
			return err
		}
		started := make(chan time.Time, 1)
		w, err := q.client.NewWorker(ordered.HandlerFunc(func(context.Context, *ordered.Job) error {
			started <- time.Now()
			return nil
		}), &ordered.WorkerConfig{Workers: 2, PollOnly: pollOnly, PollInterval: ordered.PollIntervalDefault})
		if err != nil {
			q.drop()
			return err
		}
		if err := w.Start(ctx); err != nil {
			q.drop()
			return err
		}
		time.Sleep(200 * time.Millisecond) // let the listener connect
		var lat []time.Duration
		for i := range b.sizes.wakeSamples {
			time.Sleep(time.Duration(20+rand.IntN(30)) * time.Millisecond)
			t := time.Now()
			if _, err := q.client.Enqueue(ctx, ordered.Event{Key: fmt.Sprintf("w%d", i), Seq: 0}); err != nil {
				_ = w.StopAndCancel(ctx)
				q.drop()
				return err
			}
			lat = append(lat, (<-started).Sub(t))
		}
		_ = w.Stop(ctx)
		q.drop()
		slices.Sort(lat)
		mode := "LISTEN/NOTIFY"
		note := "target p50 < 5 ms"
		if pollOnly {
			mode, note = fmt.Sprintf("poll-only (poll %s)", ordered.PollIntervalDefault), ""
		}
		b.add("wake-up enqueue->start, "+mode+": p50", ms(percentile(lat, 0.5)), "ms", false, note)
		b.add("wake-up enqueue->start, "+mode+": p99", ms(percentile(lat, 0.99)), "ms", false, "")
	}
	return nil
}

// benchChurn enqueues at a steady rate while a worker drains and archives, and samples the
// claim latency and the table's dead tuples and size.
func (b *bench) benchChurn(ctx context.Context) error {
	s := b.sizes
	q, err := b.queue(ctx, 24, nil)
	if err != nil {
		return err
	}
	defer q.drop()
	reg := prometheus.NewRegistry()
	w, err := q.client.NewWorker(ordered.HandlerFunc(func(context.Context, *ordered.Job) error { return nil }),
		&ordered.WorkerConfig{Workers: 8, PollInterval: 50 * time.Millisecond, Registerer: reg,
			Retention: 2 * time.Second, MaintenanceInterval: time.Second})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer w.StopAndCancel(context.WithoutCancel(ctx)) //nolint:errcheck

	ctx2, cancel := context.WithTimeout(ctx, s.churn)
	defer cancel()
	go func() { // the producer: every 10 ms, the events due by then at the configured rate
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		start := time.Now()
		var sent int64
		for ctx2.Err() == nil {
			<-tick.C
			due := int64(time.Since(start).Seconds() * float64(s.churnRate))
			if due <= sent {
				continue
			}
			batch := make([]ordered.Event, due-sent)
			for j := range batch {
				batch[j] = ordered.Event{Key: keyName(rand.IntN(1_000)), Seq: sent + int64(j)}
			}
			sent = due
			_, _ = q.client.EnqueueMany(ctx2, batch)
		}
	}()
	var autovacuum string
	var naptime time.Duration
	if err := q.pool.QueryRow(ctx, autovacuumSettingsSQL).Scan(&autovacuum, &naptime); err != nil {
		return err
	}
	vacuumNote := ""
	if autovacuum != "on" {
		vacuumNote = fmt.Sprintf("; autovacuum is off on this server: the bench vacuums as it would, every %s", naptime)
		if s.churn <= naptime {
			vacuumNote += ", so not within a run this short"
		}
		stood := make(chan struct{})
		go func() {
			defer close(stood)
			standInForAutovacuum(ctx2, q.pool, naptime)
		}()
		defer func() { cancel(); <-stood }()
	}
	windows := 5
	window := s.churn / time.Duration(windows)
	prev := histogramOf(reg, "ordered_claim_duration_seconds")
	for i := 1; i <= windows; i++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(window):
		}
		cur := histogramOf(reg, "ordered_claim_duration_seconds")
		var dead, live, size int64
		_ = q.pool.QueryRow(ctx, `SELECT n_dead_tup, n_live_tup, pg_total_relation_size(relid)
			FROM pg_stat_user_tables WHERE relid = to_regclass('ordered_jobs')`).Scan(&dead, &live, &size)
		at := time.Duration(i) * window
		b.add(fmt.Sprintf("churn %s at %d/s: claim p99 (bucket bound)", at.Round(time.Second), s.churnRate),
			bucketQuantile(prev, cur, 0.99)*1000, "ms", false,
			fmt.Sprintf("dead tuples %d, live %d, table+indexes %.1f MB%s", dead, live, float64(size)/(1<<20), vacuumNote))
		prev = cur
	}
	return nil
}

const (
	autovacuumSettingsSQL = `SELECT current_setting('autovacuum'),
	current_setting('autovacuum_naptime')::interval`

	// The queue tables whose dead tuples or inserts since the last vacuum passed their
	// autovacuum thresholds, from their own storage parameters (the shipped settings) or else
	// the server's.
	autovacuumDueSQL = `SELECT s.relname::text
FROM pg_stat_user_tables AS s
JOIN pg_class AS c ON c.oid = s.relid
CROSS JOIN LATERAL (
    SELECT coalesce(max(o.option_value) FILTER (WHERE o.option_name = 'autovacuum_vacuum_threshold'),
                    current_setting('autovacuum_vacuum_threshold'))::float8 AS threshold,
           coalesce(max(o.option_value) FILTER (WHERE o.option_name = 'autovacuum_vacuum_scale_factor'),
                    current_setting('autovacuum_vacuum_scale_factor'))::float8 AS scale,
           coalesce(max(o.option_value) FILTER (WHERE o.option_name = 'autovacuum_vacuum_insert_threshold'),
                    current_setting('autovacuum_vacuum_insert_threshold'))::float8 AS ins_threshold,
           coalesce(max(o.option_value) FILTER (WHERE o.option_name = 'autovacuum_vacuum_insert_scale_factor'),
                    current_setting('autovacuum_vacuum_insert_scale_factor'))::float8 AS ins_scale
    FROM pg_options_to_table(c.reloptions) AS o) AS t
WHERE s.relid IN (to_regclass('ordered_jobs'), to_regclass('ordered_keys'))
  AND (s.n_dead_tup > t.threshold + t.scale * greatest(c.reltuples, 0)
       OR s.n_ins_since_vacuum > t.ins_threshold + t.ins_scale * greatest(c.reltuples, 0))`

	// A manual VACUUM is not throttled; autovacuum is, by these settings.
	autovacuumCostSQL = `SELECT set_config('vacuum_cost_delay', current_setting('autovacuum_vacuum_cost_delay'), false),
	set_config('vacuum_cost_limit', CASE current_setting('autovacuum_vacuum_cost_limit') WHEN '-1'
	    THEN current_setting('vacuum_cost_limit') ELSE current_setting('autovacuum_vacuum_cost_limit') END, false)`
)

// vacuumStatements are the only statements standInForAutovacuum runs, by table.
var vacuumStatements = map[string]string{
	"ordered_jobs": "VACUUM (ANALYZE) ordered_jobs",
	"ordered_keys": "VACUUM (ANALYZE) ordered_keys",
}

// standInForAutovacuum does, on a server with autovacuum off, what autovacuum would do with the
// queue's shipped settings: every naptime, vacuum (throttled as autovacuum is) the queue tables
// past their thresholds. A pass that fails is skipped, as autovacuum would retry next time.
func standInForAutovacuum(ctx context.Context, pool *pgxpool.Pool, naptime time.Duration) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(naptime):
		}
		_ = vacuumDue(ctx, pool)
	}
}

// vacuumDue runs one pass of standInForAutovacuum on a connection of its own.
func vacuumDue(ctx context.Context, pool *pgxpool.Pool) error {
	pooled, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The cost settings stay with the session, so it is taken from the pool and closed after.
	conn := pooled.Hijack()
	defer conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck
	if _, err := conn.Exec(ctx, autovacuumCostSQL); err != nil {
		return err
	}
	rows, err := conn.Query(ctx, autovacuumDueSQL)
	if err != nil {
		return err
	}
	due, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, table := range due {
		if _, err := conn.Exec(ctx, vacuumStatements[table]); err != nil {
			return err
		}
	}
	return nil
}

// bucketQuantile estimates a quantile of the observations between two snapshots of a
// histogram as the upper bound of the bucket that holds it.
func bucketQuantile(prev, cur *dto.Histogram, q float64) float64 {
	if cur == nil {
		return 0
	}
	count := cur.GetSampleCount()
	if prev != nil {
		count -= prev.GetSampleCount()
	}
	if count == 0 {
		return 0
	}
	target := uint64(q * float64(count))
	for i, bk := range cur.GetBucket() {
		n := bk.GetCumulativeCount()
		if prev != nil {
			n -= prev.GetBucket()[i].GetCumulativeCount()
		}
		if n >= target {
			return bk.GetUpperBound()
		}
	}
	return cur.GetBucket()[len(cur.GetBucket())-1].GetUpperBound()
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(p*float64(len(sorted))), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
