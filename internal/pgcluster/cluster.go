package pgcluster

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Defaults of Options.
const (
	MaxConnectionsDefault = 100
	StartTimeoutDefault   = 60 * time.Second
	RunAsDefault          = "postgres"
)

// debianBinGlob is where Debian and Ubuntu install the server binaries, one dir per version.
const debianBinGlob = "/usr/lib/postgresql/*/bin"

// startAttempts bounds the retries of a start whose free port was taken in the meantime.
const startAttempts = 3

// Options configures a Cluster. The zero value is usable.
type Options struct {
	// BinDir is the directory holding initdb and pg_ctl. Empty: the directory of the initdb
	// on PATH (symlinks resolved), else the newest /usr/lib/postgresql/*/bin.
	BinDir string
	// MaxConnections is the server's max_connections. Default MaxConnectionsDefault.
	MaxConnections int
	// StartTimeout bounds how long a start or a restart waits for the server to accept
	// connections. Default StartTimeoutDefault.
	StartTimeout time.Duration
	// RunAs is the OS user that owns and runs the cluster when the caller is root (initdb and
	// postgres refuse to run as root). Default RunAsDefault. Ignored when not root.
	RunAs string
	// ListenAddresses are addresses the server listens on besides 127.0.0.1; each must be an
	// address of this host when the server starts.
	ListenAddresses []netip.Addr
	// TrustedNets are networks whose TCP connections the server trusts (a pg_hba.conf line
	// each), besides the local ones.
	TrustedNets []netip.Prefix
}

// Cluster is a private PostgreSQL cluster in a temporary directory. Its methods are safe for
// concurrent use; they run one at a time.
type Cluster struct {
	bin     string // directory of initdb and pg_ctl
	base    string // temporary directory: data dir, logs
	data    string
	logFile string
	port    int
	opts    Options
	// runuser and owner are set when the caller is root: commands run as owner via runuser.
	runuser string
	owner   *user.User

	mu     sync.Mutex
	closed bool
	// standby is set while the cluster is a standby that Promote has not promoted.
	standby bool
}

// Start creates a cluster in a new temporary directory and starts its server on a free port
// of 127.0.0.1. The server trusts every local connection; connect with URL. Close the cluster
// when done: it stops the server and removes the directory. On error nothing is left behind.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	c, err := newCluster(opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()

	// --locale=C: the caller's locale may not be installed; C always is.
	if err := c.run(ctx, "initdb", "-D", c.data, "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		return nil, err
	}
	if err := c.trustNets(); err != nil {
		return nil, err
	}
	if err := c.startOnFreePort(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// trustNets appends a trust line to pg_hba.conf for each of Options.TrustedNets.
func (c *Cluster) trustNets() error {
	if len(c.opts.TrustedNets) == 0 {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(c.data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	for _, n := range c.opts.TrustedNets {
		fmt.Fprintf(f, "host all all %s trust\n", n.Masked())
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	return nil
}

// newCluster prepares a cluster with opts filled in: its binaries, its owner and its
// temporary directory (given to the owner). On error nothing is left behind.
func newCluster(opts Options) (_ *Cluster, err error) {
	opts.MaxConnections = cmp.Or(opts.MaxConnections, MaxConnectionsDefault)
	opts.StartTimeout = cmp.Or(opts.StartTimeout, StartTimeoutDefault)
	opts.RunAs = cmp.Or(opts.RunAs, RunAsDefault)
	if opts.MaxConnections < 1 {
		return nil, fmt.Errorf("pgcluster: MaxConnections %d must be at least 1", opts.MaxConnections)
	}
	if opts.StartTimeout < time.Second {
		return nil, fmt.Errorf("pgcluster: StartTimeout %v must be at least 1s", opts.StartTimeout)
	}
	bin, err := findBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin, opts: opts}
	if os.Geteuid() == 0 {
		if c.owner, c.runuser, err = unprivilegedUser(opts.RunAs); err != nil {
			return nil, err
		}
	}
	if c.base, err = os.MkdirTemp("", "pgcluster-"); err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	c.data = filepath.Join(c.base, "data")
	c.logFile = filepath.Join(c.base, "server.log")
	if c.owner != nil {
		uid, _ := strconv.Atoi(c.owner.Uid)
		gid, _ := strconv.Atoi(c.owner.Gid)
		if err := os.Chown(c.base, uid, gid); err != nil {
			return nil, errors.Join(fmt.Errorf("pgcluster: give %s to user %s: %w", c.base, c.owner.Username, err), c.Close())
		}
	}
	return c, nil
}

// startOnFreePort starts the server on a free port. The free port is only free when we look:
// another process may take it before the server binds it. Then the start fails and we try
// another one.
func (c *Cluster) startOnFreePort(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		var err error
		if c.port, err = freePort(); err != nil {
			return err
		}
		err = c.pgCtl(ctx, "start", "-l", c.logFile, "-o", c.serverOptions())
		if err == nil {
			return nil
		}
		if attempt == startAttempts || !strings.Contains(c.logTail(), "could not bind") {
			return err
		}
	}
}

// URL is a libpq URL of the cluster's database postgres, as its superuser postgres.
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// URLAt is URL with the server reached at addr, one of Options.ListenAddresses.
func (c *Cluster) URLAt(addr netip.Addr) string {
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", net.JoinHostPort(addr.String(), strconv.Itoa(c.port)))
}

// Port is the TCP port the server listens on, on 127.0.0.1. It stays the same across restarts.
func (c *Cluster) Port() int { return c.port }

// Dir is the cluster's temporary directory: the data directory (data) and the server's log
// (server.log). Close removes it.
func (c *Cluster) Dir() string { return c.base }

// LogFile is the server's log.
func (c *Cluster) LogFile() string { return c.logFile }

// Restart stops the server with a fast shutdown (sessions are terminated, running
// transactions roll back) and starts it again on the same port; it returns once the server
// accepts connections. It also starts a stopped server.
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("pgcluster: restart: cluster closed")
	}
	// -l and -o again: without -l the new server would log to pg_ctl's output, our pipe.
	return c.pgCtl(ctx, "restart", "-m", "fast", "-l", c.logFile, "-o", c.serverOptions())
}

// Stop stops the server at once (immediate shutdown: no checkpoint, connections are cut), as
// a crash would. Stopping a stopped server does nothing. Restart starts it again.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("pgcluster: stop: cluster closed")
	}
	return c.stop(ctx)
}

// Close stops the server and removes the cluster's directory. Closing again does nothing.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if c.base == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.StartTimeout)
	defer cancel()
	var errs []error
	if err := c.stop(ctx); err != nil {
		errs = append(errs, err)
		// pg_ctl failed: stop the postmaster ourselves (SIGQUIT is an immediate shutdown).
		if pid, ok := c.postmasterPID(); ok {
			_ = syscall.Kill(pid, syscall.SIGQUIT)
		}
	}
	if err := os.RemoveAll(c.base); err != nil {
		errs = append(errs, fmt.Errorf("pgcluster: remove %s: %w", c.base, err))
	}
	return errors.Join(errs...)
}

// stop is Stop with c.mu held.
func (c *Cluster) stop(ctx context.Context) error {
	if _, running := c.postmasterPID(); !running {
		return nil
	}
	return c.pgCtl(ctx, "stop", "-m", "immediate")
}

// postmasterPID returns the server's pid and whether it runs: false when there is no
// postmaster.pid (stopped, or never started) or its process is gone (the server crashed).
func (c *Cluster) postmasterPID() (int, bool) {
	b, err := os.ReadFile(filepath.Join(c.data, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, alive(pid)
}

// serverOptions are the postgres options given to pg_ctl -o, which passes them through a
// shell: the socket directory is quoted.
func (c *Cluster) serverOptions() string {
	listen := []string{"127.0.0.1"}
	for _, a := range c.opts.ListenAddresses {
		listen = append(listen, a.String())
	}
	return fmt.Sprintf("-p %d -k %s -c listen_addresses=%s -c fsync=off -c max_connections=%d",
		c.port, shellQuote(c.data), strings.Join(listen, ","), c.opts.MaxConnections)
}

// pgCtl runs pg_ctl ACTION on the data dir, waiting (-w) up to StartTimeout.
func (c *Cluster) pgCtl(ctx context.Context, action string, args ...string) error {
	secs := strconv.Itoa(int(c.opts.StartTimeout.Round(time.Second) / time.Second))
	all := append([]string{"-D", c.data, "-w", "-t", secs}, args...)
	if err := c.run(ctx, "pg_ctl", append(all, action)...); err != nil {
		if tail := c.logTail(); tail != "" {
			err = fmt.Errorf("%w\nserver log %s ends with:\n%s", err, c.logFile, tail)
		}
		return err
	}
	return nil
}

// run runs one of the server binaries as the cluster's owner and reports its output on error.
func (c *Cluster) run(ctx context.Context, name string, args ...string) error {
	path := filepath.Join(c.bin, name)
	var cmd *exec.Cmd
	if c.owner != nil {
		cmd = exec.CommandContext(ctx, c.runuser, append([]string{"-u", c.owner.Username, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	// The owner may not be allowed into the caller's working directory.
	cmd.Dir = c.base
	cmd.Env = serverEnv()
	// The server redirects its output to the log; should anything keep our pipe open, do not
	// wait for it forever.
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgcluster: %s %s: %w\n%s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// logTail returns the last lines of the server's log, for errors.
func (c *Cluster) logTail() string {
	b, err := os.ReadFile(c.logFile)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// serverEnv is the environment of the server binaries: the caller's, without the libpq and
// server variables that could redirect them, in the C locale.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

// findBinDir returns the directory holding initdb and pg_ctl.
func findBinDir(dir string) (string, error) {
	if dir != "" {
		if !hasServerBinaries(dir) {
			return "", fmt.Errorf("pgcluster: %s does not hold the executables initdb and pg_ctl", dir)
		}
		return dir, nil
	}
	if path, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(path); err == nil && hasServerBinaries(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
	}
	dirs, _ := filepath.Glob(debianBinGlob)
	slices.SortFunc(dirs, func(a, b string) int {
		return compareVersions(filepath.Base(filepath.Dir(a)), filepath.Base(filepath.Dir(b)))
	})
	for _, d := range slices.Backward(dirs) {
		if hasServerBinaries(d) {
			return d, nil
		}
	}
	return "", errors.New("pgcluster: PostgreSQL server binaries not found: no initdb on PATH " +
		"(with pg_ctl beside it) and none in " + debianBinGlob +
		"; install the PostgreSQL server (Debian: apt-get install postgresql)")
}

func hasServerBinaries(dir string) bool {
	return isExecutable(filepath.Join(dir, "initdb")) && isExecutable(filepath.Join(dir, "pg_ctl"))
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// compareVersions orders version directory names such as "9.6", "15" and "16".
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return cmp.Compare(x, y)
		}
	}
	return strings.Compare(a, b)
}

// unprivilegedUser returns the user to run the cluster as, for a caller that is root, and
// the runuser command that switches to it.
func unprivilegedUser(name string) (*user.User, string, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, "", fmt.Errorf("pgcluster: running as root, but initdb and postgres refuse to run as root "+
			"and there is no user %q to run them as (create it, or run as an unprivileged user): %w", name, err)
	}
	if u.Uid == "0" {
		return nil, "", fmt.Errorf("pgcluster: user %q to run PostgreSQL as is root", name)
	}
	runuser, err := exec.LookPath("runuser")
	if err != nil {
		return nil, "", fmt.Errorf("pgcluster: running as root needs runuser to run PostgreSQL as %s: %w", name, err)
	}
	return u, runuser, nil
}

// freePort returns a TCP port of 127.0.0.1 that nothing listens on right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgcluster: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
