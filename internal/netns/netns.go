package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// subnetBase is the private range the hosts take their /30 from: 10.213.N.0/30, N in 1..254.
var subnetBase = [2]byte{10, 213}

// prefixPattern is what a Net's prefix may be: it starts the names of namespaces and links,
// which the kernel limits to 15 bytes.
var prefixPattern = regexp.MustCompile(`^[a-z]{1,4}$`)

// hostSeq numbers the hosts of this process, across its Nets, so their names differ.
var hostSeq atomic.Int64

// unreachableMAC is the link-layer address a partition sends the link's packets to: no
// interface has it, so the other end drops them as meant for another host.
const unreachableMAC = "02:00:00:00:00:01"

// commandTimeout bounds each ip or tc command.
const commandTimeout = 30 * time.Second

// Net is the set of hosts one process makes. Its methods are safe for concurrent use.
type Net struct {
	prefix string // the caller's prefix and this process's pid: "ov1234"

	mu     sync.Mutex
	hosts  []*Host
	closed bool
}

// New returns an empty Net whose names start with prefix (1 to 4 lower-case letters). It
// first removes the namespaces that processes no longer running left behind with the same
// prefix. It fails when this process cannot make network namespaces.
func New(ctx context.Context, prefix string) (*Net, error) {
	if !prefixPattern.MatchString(prefix) {
		return nil, fmt.Errorf("netns: prefix %q must be 1 to 4 lower-case letters", prefix)
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("netns: making network namespaces needs root (ip netns add); run as root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, errors.New("netns: ip not found on PATH; install iproute2 (Debian: apt-get install iproute2)")
	}
	if _, err := exec.LookPath("tc"); err != nil {
		return nil, errors.New("netns: tc not found on PATH; install iproute2 (Debian: apt-get install iproute2)")
	}
	if err := removeLeftovers(ctx, prefix); err != nil {
		return nil, err
	}
	return &Net{prefix: prefix + strconv.Itoa(os.Getpid())}, nil
}

// Host is a network namespace joined to the caller's by a veth pair.
type Host struct {
	// Name is the namespace's name.
	Name string
	// Addr is the host's address, inside the namespace; Gateway is the caller's end of the
	// link, the address the host reaches the caller at.
	Addr, Gateway netip.Addr
	// Subnet is the link's /30.
	Subnet netip.Prefix

	outer, inner string // the veth pair: the caller's end, the namespace's end
}

// AddHost makes a host with a free /30 of 10.213.0.0/16.
func (n *Net) AddHost(ctx context.Context) (_ *Host, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, errors.New("netns: add host: net closed")
	}
	unlock, err := lockSubnets()
	if err != nil {
		return nil, err
	}
	defer unlock()
	sub, err := freeSubnet(ctx)
	if err != nil {
		return nil, err
	}
	i := hostSeq.Add(1) - 1
	a := sub.Addr().As4()
	h := &Host{
		Name: fmt.Sprintf("%s-%d", n.prefix, i), Subnet: sub,
		Gateway: netip.AddrFrom4([4]byte{a[0], a[1], a[2], 1}), Addr: netip.AddrFrom4([4]byte{a[0], a[1], a[2], 2}),
		outer: fmt.Sprintf("%sh%d", n.prefix, i), inner: fmt.Sprintf("%sn%d", n.prefix, i),
	}
	if err := ip(ctx, "netns", "add", h.Name); err != nil {
		return nil, fmt.Errorf("netns: cannot make network namespace %s: %w", h.Name, err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, h.remove())
		}
	}()
	steps := [][]string{
		{"link", "add", h.outer, "type", "veth", "peer", "name", h.inner, "netns", h.Name},
		{"addr", "add", h.Gateway.String() + "/30", "dev", h.outer},
		{"link", "set", h.outer, "up"},
		{"-n", h.Name, "addr", "add", h.Addr.String() + "/30", "dev", h.inner},
		{"-n", h.Name, "link", "set", h.inner, "up"},
		{"-n", h.Name, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := ip(ctx, s...); err != nil {
			return nil, fmt.Errorf("netns: set up host %s: %w", h.Name, err)
		}
	}
	n.hosts = append(n.hosts, h)
	return h, nil
}

// Hosts are the hosts made so far, in order.
func (n *Net) Hosts() []*Host {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*Host(nil), n.hosts...)
}

// Close removes every host (the namespace, its link and their qdiscs go with it). Closing
// again does nothing.
func (n *Net) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	var errs []error
	for _, h := range n.hosts {
		errs = append(errs, h.remove())
	}
	return errors.Join(errs...)
}

// Exec is the command line that runs args in the host's namespace.
func (h *Host) Exec(args ...string) []string {
	return append([]string{"ip", "netns", "exec", h.Name}, args...)
}

// Partition cuts the host off: each end of the link sends its packets to a link-layer
// address nobody has (a permanent neighbour entry), so the other end drops them as meant for
// another host. Both directions go silent and neither end is told. It lasts until Heal.
func (h *Host) Partition(ctx context.Context) error {
	for _, s := range [][]string{
		{"neigh", "replace", h.Addr.String(), "lladdr", unreachableMAC, "nud", "permanent", "dev", h.outer},
		{"-n", h.Name, "neigh", "replace", h.Gateway.String(), "lladdr", unreachableMAC, "nud", "permanent", "dev", h.inner},
	} {
		if err := ip(ctx, s...); err != nil {
			return fmt.Errorf("netns: partition %s: %w", h.Name, err)
		}
	}
	return nil
}

// Heal ends a partition: the neighbour entries go and each end finds the other again. A slow
// link stays slow.
func (h *Host) Heal(ctx context.Context) error {
	for _, s := range [][]string{
		{"neigh", "del", h.Addr.String(), "dev", h.outer},
		{"-n", h.Name, "neigh", "del", h.Gateway.String(), "dev", h.inner},
	} {
		if err := ip(ctx, s...); err != nil && !strings.Contains(err.Error(), "No such file") {
			return fmt.Errorf("netns: heal %s: %w", h.Name, err)
		}
	}
	return nil
}

// Slow limits the link to bitsPerSecond each way (a token bucket, tc tbf): under load packets
// queue, so they are delayed, and those that would wait more than slowLatency are dropped.
// It lasts until Fast.
func (h *Host) Slow(ctx context.Context, bitsPerSecond int64) error {
	if bitsPerSecond < SlowRateMin {
		return fmt.Errorf("netns: slow %s: rate %d bit/s must be at least %d", h.Name, bitsPerSecond, SlowRateMin)
	}
	return h.qdisc(ctx, "replace", "tbf", "rate", strconv.FormatInt(bitsPerSecond, 10)+"bit",
		"burst", strconv.Itoa(slowBurst), "latency", slowLatency)
}

// Fast ends a slow link.
func (h *Host) Fast(ctx context.Context) error {
	err := h.qdisc(ctx, "del")
	if err != nil && (strings.Contains(err.Error(), "No such file or directory") ||
		strings.Contains(err.Error(), "handle of zero")) {
		return nil // it was not slow
	}
	return err
}

// SlowRateMin is the lowest rate of Slow: a few full frames a second.
const SlowRateMin = 64_000

// The token bucket of a slow link: a burst of a few frames, and the longest a packet queues.
const (
	slowBurst   = 8 * 1514
	slowLatency = "500ms"
)

// qdisc runs tc qdisc ACTION on the root of both ends of the link.
func (h *Host) qdisc(ctx context.Context, action string, args ...string) error {
	for _, ns := range [][]string{nil, {"-n", h.Name}} {
		dev := h.outer
		if ns != nil {
			dev = h.inner
		}
		if err := tc(ctx, append(append(ns, "qdisc", action, "dev", dev, "root"), args...)...); err != nil {
			return fmt.Errorf("netns: host %s: %w", h.Name, err)
		}
	}
	return nil
}

// remove deletes the namespace, which takes the pair with it, and the caller's end should it
// remain.
func (h *Host) remove() error {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	var errs []error
	if err := ip(ctx, "netns", "del", h.Name); err != nil && !strings.Contains(err.Error(), "No such file") {
		errs = append(errs, err)
	}
	// The kernel removes the pair with the namespace, but not always before this returns.
	if linkExists(ctx, h.outer) {
		if err := ip(ctx, "link", "del", h.outer); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeLeftovers deletes the namespaces and links named after prefix and a pid that no
// longer runs.
func removeLeftovers(ctx context.Context, prefix string) error {
	owned := regexp.MustCompile(`^` + prefix + `(\d+)[-hn]\d+$`)
	dead := func(name string) bool {
		m := owned.FindStringSubmatch(name)
		if m == nil {
			return false
		}
		pid, _ := strconv.Atoi(m[1])
		return pid > 0 && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
	}
	var errs []error
	out, err := output(ctx, "ip", "netns", "list")
	if err != nil {
		return fmt.Errorf("netns: cannot list network namespaces: %w", err)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && dead(f[0]) {
			errs = append(errs, ip(ctx, "netns", "del", f[0]))
		}
	}
	out, err = output(ctx, "ip", "-o", "link", "show")
	if err != nil {
		return fmt.Errorf("netns: cannot list links: %w", err)
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		// Deleting one end of a pair deletes the other, which may come later in the list.
		if !dead(name) {
			continue
		}
		if err := ip(ctx, "link", "del", name); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// lockSubnets takes the machine-wide lock under which a subnet is picked and put on a link,
// so that two processes never pick the same one.
func lockSubnets() (func(), error) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "ordered-netns.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("netns: lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("netns: lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// freeSubnet returns a /30 of 10.213.0.0/16 that no address of this namespace is in.
func freeSubnet(ctx context.Context) (netip.Prefix, error) {
	out, err := output(ctx, "ip", "-o", "-4", "addr", "show")
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("netns: cannot list addresses: %w", err)
	}
	used := map[byte]bool{}
	for _, f := range strings.Fields(out) {
		if p, err := netip.ParsePrefix(f); err == nil && p.Addr().Is4() {
			a := p.Addr().As4()
			if a[0] == subnetBase[0] && a[1] == subnetBase[1] {
				used[a[2]] = true
			}
		}
	}
	for n := byte(1); n < 255; n++ {
		if !used[n] {
			return netip.PrefixFrom(netip.AddrFrom4([4]byte{subnetBase[0], subnetBase[1], n, 0}), 30), nil
		}
	}
	return netip.Prefix{}, errors.New("netns: no free /30 left in 10.213.0.0/16")
}

func linkExists(ctx context.Context, name string) bool {
	_, err := output(ctx, "ip", "link", "show", "dev", name)
	return err == nil
}

func ip(ctx context.Context, args ...string) error {
	_, err := output(ctx, "ip", args...)
	return err
}

func tc(ctx context.Context, args ...string) error {
	_, err := output(ctx, "tc", args...)
	return err
}

// output runs a command and returns its output; an error carries the command and its output.
func output(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}
