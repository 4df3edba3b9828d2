package verify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/orderedq/ordered/internal/harness"
	"github.com/orderedq/ordered/internal/netns"
	"github.com/orderedq/ordered/internal/pgcluster"
	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/history"
)

// The hosts mode: each worker process runs on a host of its own, a network namespace joined to
// the database's by a link (package netns), and the faults are of the network: a host slowed
// to a low rate under load, and a host partitioned from the database, silently, for longer
// than the lease, then healed.

// hostFaults are the hosts mode's faults, at points of progress like faults. A partition
// holds the injector for its length, while the other hosts work on, so the points are early;
// and every one is injected before the run ends.
var hostFaults = []struct {
	at   int
	kind string
}{{5, "slow"}, {15, "partition"}, {20, "terminate"}, {25, "fast"}, {40, "partition"}}

// SlowRate is the rate of a slowed host's link, each way: below what its worker sends at full
// speed, so its packets queue and some are dropped.
const SlowRate = 1_000_000

// partitionLeases is how long a partition lasts, in leases: long enough for the lease to run
// out in the database and another worker to take the keys over.
const partitionLeases = 3

// topUpRounds bounds the batches of extra events enqueued, once the workload has drained, for
// a healed host's worker to show it claims again.
const topUpRounds = 20

// hostsEnv is the hosts of a hosts-mode run and the cluster, which listens on their links.
type hostsEnv struct {
	net     *netns.Net
	hosts   []*netns.Host
	cluster *pgcluster.Cluster
	// hostOf is the host index of each worker process, by pid.
	hostOf map[int]int
}

// partition is a partition injected: the host, its processes, when it was cut and healed (by
// the database clock), and what followed.
type partition struct {
	host         string
	pids         []int
	cut, healed  time.Time
	held         heldJobs       // the jobs the host held at the cut
	takeover     *time.Duration // cut to the last of them started again by another process
	claimedAgain *time.Duration // heal to the first start by the host's processes
}

// heldJobs are jobs held under a claim: their keys, seqs and claim versions.
type heldJobs struct {
	keys          []string
	seqs, version []int64
}

// readHeld reads the database clock and the jobs the processes pids hold.
func (r *run) readHeld(ctx context.Context, pids []int) (time.Time, heldJobs, error) {
	var at time.Time
	var h heldJobs
	err := r.pool.QueryRow(ctx, partitionHeldSQL, pids).Scan(&at, &h.keys, &h.seqs, &h.version)
	return at, h, err
}

// newHostsEnv makes n hosts and a cluster that listens on their links. On error nothing is
// left behind.
func newHostsEnv(ctx context.Context, n int) (_ *hostsEnv, err error) {
	nn, err := netns.New(ctx, "ov")
	if err != nil {
		return nil, err
	}
	env := &hostsEnv{net: nn, hostOf: map[int]int{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, env.close())
		}
	}()
	var listen []netip.Addr
	var nets []netip.Prefix
	for range n {
		h, err := nn.AddHost(ctx)
		if err != nil {
			return nil, err
		}
		env.hosts = append(env.hosts, h)
		listen, nets = append(listen, h.Gateway), append(nets, h.Subnet)
	}
	if env.cluster, err = pgcluster.Start(ctx, pgcluster.Options{ListenAddresses: listen, TrustedNets: nets}); err != nil {
		return nil, err
	}
	return env, nil
}

func (e *hostsEnv) close() error {
	var errs []error
	if e.cluster != nil {
		errs = append(errs, e.cluster.Close())
	}
	return errors.Join(append(errs, e.net.Close())...)
}

// runHosts is Run in the hosts mode: two runs (block with transactional effects, skip with
// at-least-once ones) with the worker processes spread over o.Hosts hosts.
func runHosts(ctx context.Context, o Options, out io.Writer) error {
	if o.Processes < o.Hosts {
		return fmt.Errorf("verify: --processes %d must be at least --hosts %d (a worker process on each host)", o.Processes, o.Hosts)
	}
	fmt.Fprintf(out, "making %d hosts (network namespaces) and a private PostgreSQL cluster on their links\n", o.Hosts)
	env, err := newHostsEnv(ctx, o.Hosts)
	if err != nil {
		return fmt.Errorf("verify --hosts needs network namespaces (root, iproute2) and a private PostgreSQL cluster: %w", err)
	}
	defer env.close()
	o.hosts = env
	var results []result
	for _, run := range []struct {
		pol string
		tx  bool
	}{{"block", true}, {"skip", false}} {
		r, err := runOne(ctx, env.cluster, o, run.pol, run.tx)
		if err != nil {
			return fmt.Errorf("run %s: %w", r.name, err)
		}
		fmt.Fprintf(out, "run %-24s done in %s\n", r.name, r.elapsed.Round(100*time.Millisecond))
		results = append(results, r)
	}
	fmt.Fprintln(out)
	errPart := printPartitions(out, o, results)
	return errors.Join(errPart, printResults(out, results))
}

// startHostWorkers starts the worker processes, process i on host i mod the hosts.
func (r *run) startHostWorkers() error {
	env := r.o.hosts
	r.procs = make([]*workerProc, r.o.Processes)
	for i := range r.procs {
		p, err := env.spawn(i%len(env.hosts), r.workerArgs(r.workerURL))
		if err != nil {
			r.procs = r.procs[:i]
			return err
		}
		r.procs[i] = watch(p, nil)
	}
	return nil
}

// spawn starts this binary with args on host hi; args' --database-url is pointed at the
// host's gateway.
func (e *hostsEnv) spawn(hi int, args []string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	h := e.hosts[hi]
	for i := range args[:len(args)-1] {
		if args[i] == "--database-url" {
			args[i+1] = withHost(args[i+1], h.Gateway, e.cluster.Port())
		}
	}
	argv := h.Exec(append([]string{exe}, args...)...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start a worker on host %s: %w", h.Name, err)
	}
	e.hostOf[cmd.Process.Pid] = hi
	return cmd, nil
}

// injectHostFault injects a fault of the hosts mode.
func (r *run) injectHostFault(ctx context.Context, fault string) error {
	env := r.o.hosts
	slowHost := env.hosts[len(env.hosts)-1]
	switch fault {
	case "slow":
		return slowHost.Slow(ctx, SlowRate)
	case "fast":
		return slowHost.Fast(ctx)
	case "partition":
		return r.partition(ctx, len(r.res.partitions)%len(env.hosts))
	}
	return fmt.Errorf("unknown fault %q", fault)
}

// partition cuts host hi off for partitionLeases leases, then heals it.
func (r *run) partition(ctx context.Context, hi int) error {
	env := r.o.hosts
	h := env.hosts[hi]
	p := partition{host: h.Name}
	for _, proc := range r.procs {
		if env.hostOf[proc.Process.Pid] == hi {
			p.pids = append(p.pids, proc.Process.Pid)
		}
	}
	// What the host holds is read once it is cut off, so that it is held at the cut: a job
	// that finished between the look and the cut (as happens often on a saturated machine) is
	// not counted, and the host is cut again, while jobs are pending, up to the run's timeout.
	// A cut and its heal take milliseconds. A workload that drained before this point (the
	// injector lags on a saturated machine) gets extra events, so that the cut finds the host
	// mid-job.
	deadline := time.Now().Add(r.o.Timeout)
	for extra := 0; ; {
		pending, err := r.awaitHeld(ctx, p.pids)
		if err != nil {
			return err
		}
		if !pending && extra < topUpRounds {
			extra++
			prefix := fmt.Sprintf("cut%d-%02d", len(r.res.partitions), extra)
			if err := r.enqueueExtra(ctx, prefix, r.o.Processes*r.o.Workers, 3); err != nil {
				return err
			}
			continue
		}
		if err := h.Partition(ctx); err != nil {
			return err
		}
		if p.cut, p.held, err = r.readHeld(ctx, p.pids); err != nil {
			return err
		}
		if len(p.held.keys) > 0 || !pending || time.Now().After(deadline) {
			break
		}
		if err := h.Heal(ctx); err != nil {
			return err
		}
	}
	select {
	case <-time.After(partitionLeases * r.o.Lease):
	case <-ctx.Done():
	}
	if err := h.Heal(ctx); err != nil {
		return err
	}
	if err := r.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&p.healed); err != nil {
		return err
	}
	r.res.partitions = append(r.res.partitions, p)
	return nil
}

// awaitHeld waits until the processes pids hold a job, so that a partition cuts them off
// mid-job, or until nothing is pending; it reports whether jobs are pending.
func (r *run) awaitHeld(ctx context.Context, pids []int) (pending bool, err error) {
	deadline := time.Now().Add(r.o.Timeout)
	for ; time.Now().Before(deadline); time.Sleep(progressPoll) {
		_, held, err := r.readHeld(ctx, pids)
		if err != nil {
			return false, err
		}
		_, n, err := harness.Progress(ctx, r.pool)
		if err != nil {
			return false, err
		}
		if len(held.keys) > 0 || n == 0 {
			return n > 0, nil
		}
	}
	return false, fmt.Errorf("the processes %v held no job within %s", pids, r.o.Timeout)
}

// topUp is called once the workload has drained. In the hosts mode, while a healed host's
// worker has not claimed since its heal, it enqueues a batch of extra events for it to claim
// and lets them drain, a lease at least, up to topUpRounds times.
func (r *run) topUp(ctx context.Context) error {
	if r.o.hosts == nil {
		return nil
	}
	deadline := time.Now().Add(r.o.Timeout)
	for r.res.topUps < topUpRounds {
		if waiting, err := r.healedIdle(ctx); err != nil || !waiting {
			return err
		}
		r.res.topUps++
		if err := r.enqueueExtra(ctx, fmt.Sprintf("extra-%02d", r.res.topUps), r.o.Processes*r.o.Workers, 3); err != nil {
			return err
		}
		for until := time.Now().Add(r.o.Lease); ; time.Sleep(progressPoll) {
			_, pending, err := harness.Progress(ctx, r.pool)
			if err == nil && pending == 0 && time.Now().After(until) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("extra events did not drain within %s (%d jobs pending)", r.o.Timeout, pending)
			}
		}
	}
	return nil
}

// healedIdle reports whether a healed host's worker has not claimed since the heal.
func (r *run) healedIdle(ctx context.Context) (bool, error) {
	for _, p := range r.res.partitions {
		var d *time.Duration
		if err := r.pool.QueryRow(ctx, firstStartAfterSQL, p.pids, p.healed).Scan(&d); err != nil || d == nil {
			return err == nil, err
		}
	}
	return false, nil
}

// enqueueExtra enqueues perKey plain events on each of keys new keys named after prefix.
func (r *run) enqueueExtra(ctx context.Context, prefix string, keys, perKey int) error {
	var events []ordered.Event
	for k := range keys {
		key := fmt.Sprintf("%s-%03d", prefix, k)
		for s := range perKey {
			events = append(events, ordered.Event{Key: key, Seq: int64(s), Payload: []byte(`{}`), MaxAttempts: 10})
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

// checkPartitions measures, for each partition, the takeover of the jobs the host held at the
// cut (each one's first start by another process under a newer claim; the takeover is the
// last of these) and the host's first claim after the heal.
func (r *run) checkPartitions(ctx context.Context) error {
	for i := range r.res.partitions {
		p := &r.res.partitions[i]
		if err := r.pool.QueryRow(ctx, partitionTakeoverSQL, p.held.keys, p.held.seqs, p.held.version, p.cut, p.pids).Scan(&p.takeover); err != nil {
			return err
		}
		if err := r.pool.QueryRow(ctx, firstStartAfterSQL, p.pids, p.healed).Scan(&p.claimedAgain); err != nil {
			return err
		}
	}
	return nil
}

// printPartitions prints the partitions of the runs; it fails when a partitioned host's worker
// never claimed again after the heal. A takeover is reported, not required: on a loaded
// machine the healed host may claim its jobs back before another host gets to them.
func printPartitions(out io.Writer, o Options, results []result) error {
	fmt.Fprintf(out, "partitions (each %s, %d leases; the takeover's goal is within lease + poll = %s of the cut)\n",
		partitionLeases*o.Lease, partitionLeases, o.Lease+Worker{}.WorkerConfig().PollInterval)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\thost\tjobs held\tcut to takeover\theal to first claim\t")
	var errs []error
	show := func(d *time.Duration) string {
		if d == nil {
			return "never"
		}
		return d.Round(10 * time.Millisecond).String()
	}
	for _, r := range results {
		for _, p := range r.partitions {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t\n", r.name, p.host, len(p.held.keys), show(p.takeover), show(p.claimedAgain))
			if p.claimedAgain == nil {
				errs = append(errs, fmt.Errorf("verify: %s: host %s's worker never claimed a job again after the heal", r.name, p.host))
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, err := range errs {
		fmt.Fprintln(out, "  "+err.Error())
	}
	fmt.Fprintln(out)
	return errors.Join(errs...)
}

// withHost points a libpq URL at addr:port.
func withHost(raw string, addr netip.Addr, port int) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Host = net.JoinHostPort(addr.String(), strconv.Itoa(port))
	return u.String()
}
