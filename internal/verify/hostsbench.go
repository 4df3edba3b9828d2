package verify

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/orderedq/ordered/internal/harness"
)

// benchHosts are the host counts the hosts bench spreads the same worker processes over; 0 is
// the database's own host, over loopback, for reference.
var benchHosts = []int{0, 1, 2, 4}

// benchProcesses is the number of worker processes of the hosts bench, whatever the hosts.
const benchProcesses = 4

// hostsBenchRow is one drain of the hosts bench.
type hostsBenchRow struct {
	hosts   int
	jobs    int
	elapsed time.Duration
	cpuBusy float64 // the share of the machine's CPU time spent busy during the drain
}

// RunHostsBench drains the same workload (o.Keys x o.PerKey plain events, no faults) with
// benchProcesses worker processes of o.Workers handlers each, spread over 1, 2 and 4 hosts
// (and, for reference, on the database's host over loopback), against one cluster, and prints
// jobs/s for each, their ratio to 1 host and how busy the machine's CPUs were.
func RunHostsBench(ctx context.Context, o Options, out io.Writer) error {
	fmt.Fprintf(out, "making %d hosts (network namespaces) and a private PostgreSQL cluster on their links\n", benchHosts[len(benchHosts)-1])
	env, err := newHostsEnv(ctx, benchHosts[len(benchHosts)-1])
	if err != nil {
		return fmt.Errorf("verify --hosts-bench needs network namespaces (root, iproute2) and a private PostgreSQL cluster: %w", err)
	}
	defer env.close()
	o.Processes, o.Work = benchProcesses, 0
	var rows []hostsBenchRow
	for _, n := range benchHosts {
		row, err := benchDrain(ctx, env, o, n)
		if err != nil {
			return fmt.Errorf("hosts bench on %d hosts: %w", n, err)
		}
		fmt.Fprintf(out, "drained %d jobs on %s in %s\n", row.jobs, hostsLabel(n), row.elapsed.Round(10*time.Millisecond))
		rows = append(rows, row)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workers on\tprocesses\thandlers\tjobs\tjobs/s\tvs 1 host\tcpu busy\t")
	base := float64(rows[1].jobs) / rows[1].elapsed.Seconds()
	for _, r := range rows {
		rate := float64(r.jobs) / r.elapsed.Seconds()
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.0f\t%.2fx\t%.0f%%\t\n", hostsLabel(r.hosts), o.Processes, o.Processes*o.Workers, r.jobs, rate, rate/base, 100*r.cpuBusy)
	}
	return tw.Flush()
}

// benchDrain drains the workload, in a fresh schema, with the processes on the first n hosts
// (none: the database's host).
func benchDrain(ctx context.Context, env *hostsEnv, o Options, n int) (hostsBenchRow, error) {
	r := &run{o: o, cluster: env.cluster, policy: "skip", transactional: true, rng: rand.New(rand.NewPCG(1, 1))}
	if err := r.setup(ctx, fmt.Sprintf("verify_hosts_bench_%d", n)); err != nil {
		return hostsBenchRow{}, err
	}
	defer r.pool.Close()
	if err := r.enqueueExtra(ctx, "bench", o.Keys, o.PerKey); err != nil {
		return hostsBenchRow{}, err
	}
	defer r.killWorkers()
	for i := range o.Processes {
		var p *workerProc
		var err error
		if n == 0 {
			p, err = r.spawn()
		} else {
			var cmd *exec.Cmd
			if cmd, err = env.spawn(i%n, r.workerArgs(r.workerURL)); err == nil {
				p = watch(cmd, nil)
			}
		}
		if err != nil {
			return hostsBenchRow{}, err
		}
		r.procs = append(r.procs, p)
	}
	// The clock starts at the first settled job, so the processes' start-up is not counted.
	var start time.Time
	var cpu0 cpuTimes
	deadline := time.Now().Add(o.Timeout)
	for ; ; time.Sleep(progressPoll) {
		settled, pending, err := harness.Progress(ctx, r.pool)
		if err != nil {
			return hostsBenchRow{}, err
		}
		if start.IsZero() && settled > 0 {
			start, cpu0 = time.Now(), readCPU()
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			return hostsBenchRow{}, fmt.Errorf("did not drain within %s (%d jobs pending)", o.Timeout, pending)
		}
	}
	row := hostsBenchRow{hosts: n, jobs: len(r.enqueued), elapsed: time.Since(start), cpuBusy: readCPU().busySince(cpu0)}
	for _, p := range r.procs {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	return row, nil
}

// cpuTimes are the machine's CPU times from /proc/stat, in ticks: busy and all.
type cpuTimes struct{ busy, total float64 }

// readCPU reads the first line of /proc/stat; zero when it cannot.
func readCPU() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var t cpuTimes
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		t.total += v
		if i != 3 && i != 4 { // idle, iowait
			t.busy += v
		}
	}
	return t
}

// busySince is the busy share of the CPU time since t0.
func (t cpuTimes) busySince(t0 cpuTimes) float64 {
	if t.total <= t0.total {
		return 0
	}
	return (t.busy - t0.busy) / (t.total - t0.total)
}

// hostsLabel names where the processes of a drain ran.
func hostsLabel(n int) string {
	switch n {
	case 0:
		return "loopback"
	case 1:
		return "1 host"
	}
	return strconv.Itoa(n) + " hosts"
}
