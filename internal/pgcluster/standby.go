package pgcluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// StandbyNameDefault is a standby's application_name unless StandbyOptions.Name says otherwise.
const StandbyNameDefault = "standby"

// pollInterval is how often a wait for the server's state looks again.
const pollInterval = 20 * time.Millisecond

// StandbyOptions configures a standby made by StartStandby.
type StandbyOptions struct {
	// Name is the standby's application_name, the name the primary's
	// synchronous_standby_names and pg_stat_replication know it by. Default
	// StandbyNameDefault.
	Name string
	// Synchronous makes the primary wait, at every commit, until the standby has the commit's
	// WAL on disk (synchronous_standby_names = Name, synchronous_commit = on): a commit the
	// primary acknowledged survives a promotion of the standby. Otherwise replication is
	// asynchronous, and what the standby had not received when the primary died is lost.
	Synchronous bool
}

// StartStandby makes a streaming-replication standby of the running cluster c: a base backup
// taken with pg_basebackup -R through a replication slot of c's, started on a free port with
// c's options. It returns once the standby streams from c and, when opts.Synchronous, once c
// counts it as its synchronous standby. Close it as any cluster; Promote makes it a primary.
//
// The standby's configuration never names a synchronous standby of its own, so a promoted
// standby without a standby of its own takes writes at once.
func (c *Cluster) StartStandby(ctx context.Context, opts StandbyOptions) (_ *Cluster, err error) {
	opts.Name = cmp.Or(opts.Name, StandbyNameDefault)
	if !validName(opts.Name) {
		return nil, fmt.Errorf("pgcluster: standby name %q: use lower-case letters, digits and underscores", opts.Name)
	}
	if !isExecutable(filepath.Join(c.bin, "pg_basebackup")) {
		return nil, fmt.Errorf("pgcluster: no pg_basebackup in %s: a standby needs it beside initdb and pg_ctl", c.bin)
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, errors.New("pgcluster: start standby: cluster closed")
	}
	s, err := newCluster(c.opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Close())
		}
	}()
	s.standby = true

	// -R writes primary_conninfo and standby.signal; the slot keeps on c the WAL the standby
	// has not received yet, however far it falls behind.
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s", c.port, opts.Name)
	if err := s.run(ctx, "pg_basebackup", "-D", s.data, "-d", conninfo, "-R", "-X", "stream",
		"-C", "-S", opts.Name, "-c", "fast", "--no-sync"); err != nil {
		return nil, err
	}
	// The backup copied c's postgresql.auto.conf, which may name a synchronous standby; the
	// standby's own setting comes last and wins.
	if err := appendConf(filepath.Join(s.data, "postgresql.auto.conf"), "synchronous_standby_names = ''"); err != nil {
		return nil, err
	}
	if err := s.startOnFreePort(ctx); err != nil {
		return nil, err
	}

	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		return nil, fmt.Errorf("pgcluster: connect to the primary: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if opts.Synchronous {
		// The name is checked above: it needs no quoting, and a setting cannot be a parameter.
		if _, err := conn.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '"+opts.Name+"'"); err != nil {
			return nil, fmt.Errorf("pgcluster: make %s synchronous: %w", opts.Name, err)
		}
		if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			return nil, fmt.Errorf("pgcluster: reload the primary's configuration: %w", err)
		}
	}
	want := "async"
	if opts.Synchronous {
		want = "sync"
	}
	err = s.waitFor(ctx, fmt.Sprintf("the standby %s streaming (%s) from port %d", opts.Name, want, c.port), func() (bool, error) {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication
			WHERE application_name = $1 AND state = 'streaming' AND sync_state = $2`, opts.Name, want).Scan(&n)
		return n == 1, err
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Promote ends the standby's recovery (pg_ctl promote) and returns once it takes writes: it
// is then a primary, on the same port.
func (c *Cluster) Promote(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return errors.New("pgcluster: promote: cluster closed")
	case !c.standby:
		return errors.New("pgcluster: promote: not a standby")
	}
	if err := c.pgCtl(ctx, "promote"); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		return fmt.Errorf("pgcluster: connect to the promoted standby: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = c.waitFor(ctx, "the promoted standby to take writes", func() (bool, error) {
		var inRecovery bool
		err := conn.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&inRecovery)
		return !inRecovery, err
	})
	if err != nil {
		return err
	}
	c.standby = false
	return nil
}

// Kill crashes the server: SIGKILL to the postmaster and to every process of its process
// group (its backends, WAL senders and receivers), all at once, as when its machine dies. No
// shutdown runs and nothing is flushed; clients see their connections close. It returns once
// the postmaster is gone. Close removes what is left.
func (c *Cluster) Kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("pgcluster: kill: cluster closed")
	}
	pid, running := c.postmasterPID()
	if !running {
		return errors.New("pgcluster: kill: the server is not running")
	}
	// pg_ctl starts the postmaster as the leader of a session and process group of its own,
	// which its children share. Kill the group only if it is that one.
	target := pid
	if pgid, err := syscall.Getpgid(pid); err == nil && pgid == pid {
		target = -pid
	}
	if err := syscall.Kill(target, syscall.SIGKILL); err != nil {
		return fmt.Errorf("pgcluster: kill postmaster %d: %w", pid, err)
	}
	deadline := time.Now().Add(c.opts.StartTimeout)
	for alive(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("pgcluster: kill: postmaster %d still alive after %v", pid, c.opts.StartTimeout)
		}
		time.Sleep(pollInterval)
	}
	return nil
}

// MultiHostURL is a libpq URL that lists the clusters' servers in order, for the session
// that takes writes (target_session_attrs=read-write): a client tries each server in turn
// and keeps the first that is a primary, so it follows a promotion without a new URL.
func MultiHostURL(clusters ...*Cluster) string {
	hosts := make([]string, len(clusters))
	for i, c := range clusters {
		hosts[i] = "127.0.0.1:" + strconv.Itoa(c.port)
	}
	return "postgres://postgres@" + strings.Join(hosts, ",") +
		"/postgres?sslmode=disable&target_session_attrs=read-write"
}

// waitFor polls done until it reports true, StartTimeout passes or ctx ends. Errors of done
// are retried (the server may be on its way up) and the last one is reported.
func (c *Cluster) waitFor(ctx context.Context, what string, done func() (bool, error)) error {
	deadline := time.Now().Add(c.opts.StartTimeout)
	for {
		ok, err := done()
		if ok && err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			msg := fmt.Sprintf("pgcluster: gave up waiting for %s", what)
			if err != nil {
				return fmt.Errorf("%s: %w", msg, err)
			}
			return errors.New(msg)
		}
		select {
		case <-ctx.Done():
		case <-time.After(pollInterval):
		}
	}
}

// alive reports whether process pid exists and is not a zombie (a killed postmaster whose
// parent, often init, has not reaped it yet).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// The state follows the command name, which is in parentheses and may hold spaces.
	_, rest, ok := strings.Cut(string(b[strings.LastIndexByte(string(b), ')')+1:]), " ")
	return !ok || !strings.HasPrefix(rest, "Z")
}

// appendConf appends a line to a configuration file the cluster's owner keeps.
func appendConf(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		_ = f.Close()
		return fmt.Errorf("pgcluster: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("pgcluster: write %s: %w", path, err)
	}
	return nil
}

// validName reports whether name is a standby name that needs no quoting anywhere: lower-case
// letters, digits and underscores, not starting with a digit.
func validName(name string) bool {
	if name == "" || len(name) > 63 || (name[0] >= '0' && name[0] <= '9') {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}
