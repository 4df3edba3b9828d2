package netns_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/netns"
)

// payload is what the listener sends each connection before it closes it.
const payload = 64 << 10

// setup makes a Net with one host and a listener on the host's gateway; all go at cleanup.
func setup(t *testing.T) (*netns.Net, *netns.Host, net.Listener) {
	t.Helper()
	ctx := context.Background()
	n, err := netns.New(ctx, "nt")
	require.NoError(t, err, "network namespaces are needed")
	t.Cleanup(func() { require.NoError(t, n.Close()) })
	h, err := n.AddHost(ctx)
	require.NoError(t, err)
	l, err := net.Listen("tcp", net.JoinHostPort(h.Gateway.String(), "0"))
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = c.Write(make([]byte, payload))
			}()
		}
	}()
	return n, h, l
}

// dial runs a child in the host that dials l; it returns the child's line.
func dial(t *testing.T, h *netns.Host, l net.Listener, timeout time.Duration) string {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	argv := h.Exec(exe)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "NETNS_TEST_DIAL="+l.Addr().String(), "NETNS_TEST_DIAL_TIMEOUT="+timeout.String())
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	return strings.TrimSpace(string(out))
}

// A process run with Exec is in the host: it reaches the caller's end of the link from the
// host's own address.
func TestExecRunsInTheHost(t *testing.T) {
	t.Parallel()
	_, h, l := setup(t)
	require.True(t, h.Subnet.Contains(h.Addr) && h.Subnet.Contains(h.Gateway) && h.Subnet.Bits() == 30, "%v %v %v", h.Subnet, h.Addr, h.Gateway)
	line := dial(t, h, l, time.Minute)
	require.Regexp(t, `^ok `+h.Addr.String()+`:\d+ \d+$`, line)
}

// A partition is silence: a connection attempt is neither refused nor told the network is
// unreachable, it times out; after Heal the host connects again.
func TestPartitionIsSilentAndHeals(t *testing.T) {
	t.Parallel()
	_, h, l := setup(t)
	ctx := context.Background()
	require.NoError(t, h.Partition(ctx))
	require.Equal(t, "error dial tcp "+l.Addr().String()+": i/o timeout", dial(t, h, l, 500*time.Millisecond))
	require.NoError(t, h.Heal(ctx))
	require.Regexp(t, `^ok `, dial(t, h, l, time.Minute))
}

// A slow link limits the rate both ways: the payload takes at least its size over the rate,
// less the bucket's burst. Fast takes the limit away (the qdisc is gone), and a partition
// healed over a slow link leaves it slow.
func TestSlowLimitsTheLink(t *testing.T) {
	t.Parallel()
	_, h, l := setup(t)
	ctx := context.Background()
	const rate = 512_000
	require.NoError(t, h.Slow(ctx, rate))
	line := dial(t, h, l, time.Minute)
	f := strings.Fields(line)
	require.Len(t, f, 3, line)
	ms, err := strconv.Atoi(f[2])
	require.NoError(t, err)
	least := time.Duration((payload-8*1514)*8) * time.Second / rate
	require.GreaterOrEqual(t, time.Duration(ms)*time.Millisecond, least, "64 KiB over the slow link: %s", line)
	require.NoError(t, h.Partition(ctx))
	require.NoError(t, h.Heal(ctx))
	require.Contains(t, qdisc(t, h), "tbf")
	require.NoError(t, h.Fast(ctx))
	require.NotContains(t, qdisc(t, h), "tbf")
	require.NoError(t, h.Fast(ctx), "a fast link again")
	require.ErrorContains(t, h.Slow(ctx, 1000), "rate 1000 bit/s must be at least 64000")
}

// qdisc is the qdisc of both ends of the host's link, and of nothing else: other tests' hosts
// may be slowed at the same time.
func qdisc(t *testing.T, h *netns.Host) string {
	t.Helper()
	return run(t, "tc", "-n", h.Name, "qdisc", "show") + run(t, "tc", "qdisc", "show", "dev", netns.OuterOf(h))
}

// Close removes the namespace and both ends of its link; New removes what a process that is
// gone left behind under the same prefix, and leaves alone what a live one made.
func TestCloseAndLeftoversRemoveEverything(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n, err := netns.New(ctx, "nu")
	require.NoError(t, err)
	h, err := n.AddHost(ctx)
	require.NoError(t, err)
	require.Contains(t, run(t, "ip", "netns", "list"), h.Name)
	require.NoError(t, n.Close())
	require.NotContains(t, run(t, "ip", "netns", "list"), h.Name)
	require.NotContains(t, run(t, "ip", "-o", "addr", "show"), h.Gateway.String()+"/30")

	// Leftovers of a pid that does not run (pid_max is at most 2^22), and of this one.
	const deadPid = 4194305
	deadNS, liveNS := "nu"+strconv.Itoa(deadPid)+"-0", "nu"+strconv.Itoa(os.Getpid())+"-7"
	run(t, "ip", "netns", "add", deadNS)
	run(t, "ip", "netns", "add", liveNS)
	run(t, "ip", "link", "add", "nu"+strconv.Itoa(deadPid)+"h0", "type", "veth", "peer", "name", "nu"+strconv.Itoa(deadPid)+"n0")
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", liveNS).Run() })
	n2, err := netns.New(ctx, "nu")
	require.NoError(t, err)
	require.NoError(t, n2.Close())
	list := run(t, "ip", "netns", "list")
	require.NotContains(t, list, deadNS)
	require.Contains(t, list, liveNS)
	require.NotContains(t, run(t, "ip", "-o", "link", "show"), "nu"+strconv.Itoa(deadPid)+"h0")
}

// Bad input is refused with the problem named.
func TestNewRefusesABadPrefix(t *testing.T) {
	t.Parallel()
	_, err := netns.New(context.Background(), "Bad-1")
	require.ErrorContains(t, err, `prefix "Bad-1" must be 1 to 4 lower-case letters`)
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	require.NoError(t, err, "%s %v: %s", name, args, out)
	return string(out)
}
