package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered/orderedtest"
	"github.com/orderedq/ordered/schema"
)

// runBin runs the built binary as `ordered args...` with stdin and waits for it, for at most a
// minute: a command that hangs fails the test.
func runBin(t *testing.T, stdin string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cliBin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "ordered %s still ran a minute later; stderr:\n%s", strings.Join(args, " "), stderr.String())
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return cliResult{args: args, stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// startCLI starts `ordered args...` as a process, like startCLIWorker but with any arguments.
func startCLI(t *testing.T, args ...string) *cliProc {
	t.Helper()
	dir := t.TempDir()
	stdout, err := os.Create(filepath.Join(dir, "worker.stdout"))
	require.NoError(t, err)
	defer stdout.Close()
	stderr, err := os.Create(filepath.Join(dir, "worker.stderr"))
	require.NoError(t, err)
	defer stderr.Close()
	cmd := exec.Command(cliBin, args...)
	cmd.Env = append(os.Environ(), "ORDERED_TEST_DIR="+dir)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	require.NoError(t, cmd.Start())
	p := &cliProc{cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		p.exitedAt = time.Now()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("ordered %s stderr:\n%s", strings.Join(args, " "), p.stderr())
		}
	})
	return p
}

// silentServer accepts TCP connections and never answers them, as a server that hangs does.
type silentServer struct {
	ln       net.Listener
	mu       sync.Mutex
	conns    []net.Conn
	accepted chan struct{} // gets a token per connection accepted
	done     chan struct{}
}

func newSilentServer(t *testing.T) *silentServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &silentServer{ln: ln, accepted: make(chan struct{}, 100), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			select {
			case s.accepted <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-s.done
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.conns {
			c.Close()
		}
	})
	return s
}

// url is a database URL on the server with the extra query parameters (such as
// "&connect_timeout=1").
func (s *silentServer) url(extra string) string {
	return "postgres://postgres@" + s.ln.Addr().String() + "/postgres?sslmode=disable" + extra
}

// Against a server that accepts and never answers, a command gives up after the default
// connect timeout, or the URL's connect_timeout, with one line that names the connection and
// the limit.
func TestConnectTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, extra, within string
	}{
		{"default", "", "no answer within 10s"},
		{"from the URL", "&connect_timeout=1", "no answer within 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSilentServer(t)
			r := runBin(t, "", "status", "--database-url", s.url(tc.extra))
			requireOneLineError(t, r)
			require.Contains(t, r.stderr, s.ln.Addr().String(), "the error names the server")
			require.Contains(t, r.stderr, tc.within)
		})
	}
}

// A signal while connecting ends a command at once: status fails (it did not do its job);
// work stops cleanly (a stop before the start is a stop: nothing ran), exit 0, with one line.
func TestSignalWhileConnecting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		sig  syscall.Signal
		code int
		line string
	}{
		{[]string{"status"}, syscall.SIGINT, 1, "ordered: connect to 127.0.0.1:"},
		{[]string{"work", "--exec", "true"}, syscall.SIGTERM, 0, "stopped by a signal before the worker started"},
		{[]string{"work", "--exec", "true"}, syscall.SIGINT, 0, "stopped by a signal before the worker started"},
	} {
		t.Run(tc.args[0]+" "+tc.sig.String(), func(t *testing.T) {
			t.Parallel()
			s := newSilentServer(t)
			// The URL's limit outlasts the test: only the signal can end the wait.
			p := startCLI(t, append(tc.args, "--database-url", s.url("&connect_timeout=600"))...)
			select {
			case <-s.accepted:
			case <-time.After(30 * time.Second):
				t.Fatal("never connected")
			}
			p.signal(t, tc.sig)
			require.Equal(t, tc.code, p.wait(t, 30*time.Second))
			stderr := p.stderr()
			require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
			require.Contains(t, stderr, tc.line)
		})
	}
}

// emptySchemaURL is q's URL on a new schema without migrations, dropped when the test ends.
func emptySchemaURL(t *testing.T, q *orderedtest.Queue) string {
	t.Helper()
	name := q.Schema + "_empty"
	ident := pgx.Identifier{name}.Sanitize()
	_, err := q.Pool.Exec(context.Background(), "CREATE SCHEMA "+ident)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := q.Pool.Exec(context.Background(), "DROP SCHEMA "+ident+" CASCADE")
		require.NoError(t, err)
	})
	return withSchema(q.URL, name)
}

// On an unmigrated database every queue command fails at once with one line that says to
// migrate, enqueue also with an empty input; after `ordered migrate` they work.
func TestUnmigratedDatabase(t *testing.T) {
	t.Parallel()
	dbURL := emptySchemaURL(t, orderedtest.New(t))
	commands := [][]string{
		{"status"}, {"failed"}, {"enqueue"}, {"enqueue", os.DevNull}, {"work", "--exec", "true"},
		{"replay", "1"}, {"skip", "1"}, {"archive"},
	}
	t.Run("commands", func(t *testing.T) {
		for _, args := range commands {
			t.Run(args[0], func(t *testing.T) {
				t.Parallel()
				r := runBin(t, `{"key":"k","seq":1}`+"\n", append(args, "--database-url", dbURL)...)
				requireOneLineError(t, r)
				require.Contains(t, r.stderr, "schema not migrated")
				require.Contains(t, r.stderr, "`ordered migrate`")
			})
		}
	})

	r := runBin(t, "", "migrate", "--database-url", dbURL)
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "applied migrations")
	r = runBin(t, "", "status", "--database-url", dbURL)
	require.Zero(t, r.code, r.stderr)
}

// A database that a newer version migrated: the commands, migrate included, say so in one line.
func TestDatabaseNewerThanBinary(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	ms, err := schema.Migrations()
	require.NoError(t, err)
	_, err = q.Pool.Exec(context.Background(), "INSERT INTO ordered_migrations (version, name) VALUES ($1, 'newer')",
		ms[len(ms)-1].Version+1)
	require.NoError(t, err)
	for _, args := range [][]string{{"status"}, {"migrate"}, {"work", "--exec", "true"}} {
		r := runBin(t, "", append(args, "--database-url", q.URL)...)
		requireOneLineError(t, r)
		require.Contains(t, r.stderr, "schema is newer than this binary", "ordered %s", args[0])
	}
}

// `ordered migrate` as a role that may use the schema but not create in it: on a current
// schema there is nothing to create, and it says so.
func TestMigrateUpToDateWithoutCreatePrivilege(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	ctx := context.Background()
	role := q.Schema + "_role"
	ident, schemaIdent := pgx.Identifier{role}.Sanitize(), pgx.Identifier{q.Schema}.Sanitize()
	_, err := q.Pool.Exec(ctx, "CREATE ROLE "+ident+" LOGIN")
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, sql := range []string{"DROP OWNED BY " + ident, "DROP ROLE " + ident} {
			_, err := q.Pool.Exec(context.Background(), sql)
			require.NoError(t, err)
		}
	})
	for _, sql := range []string{
		"GRANT USAGE ON SCHEMA " + schemaIdent + " TO " + ident,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + schemaIdent + " TO " + ident,
	} {
		_, err := q.Pool.Exec(ctx, sql)
		require.NoError(t, err)
	}
	u, err := url.Parse(q.URL)
	require.NoError(t, err)
	u.User = url.User(role)
	var canCreate bool
	require.NoError(t, q.Pool.QueryRow(ctx, "SELECT has_schema_privilege($1, $2, 'CREATE')", role, q.Schema).Scan(&canCreate))
	require.False(t, canCreate)

	r := runBin(t, "", "migrate", "--database-url", u.String())
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "schema is up to date\n", r.stdout)
	require.Empty(t, r.stderr)
}

// A worker process whose queue a newer version migrates while it runs stops at its next
// maintenance pass and exits non-zero, its last line saying why: it is no longer the
// version that the queue's functions answer.
func TestWorkExitsWhenTheSchemaChangesUnderIt(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	enqueueCLI(t, q, `{"key":"k","seq":1}`+"\n")
	w := startCLIWorker(t, q, "--exec", "true")
	require.Eventually(t, func() bool { return jobStatesAre(q.Pool, "k/1 done attempts=1") },
		20*time.Second, 10*time.Millisecond, "worker stderr:\n%s", w.stderr())

	ms, err := schema.Migrations()
	require.NoError(t, err)
	newer := ms[len(ms)-1].Version + 1
	ctx := context.Background()
	_, err = q.Pool.Exec(ctx, "INSERT INTO ordered_migrations (version, name) VALUES ($1, 'newer')", newer)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := q.Pool.Exec(ctx, "DELETE FROM ordered_migrations WHERE version = $1", newer)
		require.NoError(t, err)
	})
	require.NotZero(t, w.wait(t, 60*time.Second), w.stderr())
	lines := strings.Split(strings.TrimSpace(w.stderr()), "\n")
	require.Regexp(t, `^ordered: worker stopped: another version migrated the queue under it; run that version's workers \(the database has migrations \[\d+\]; this binary knows up to \d+\)$`,
		lines[len(lines)-1])
}

// A queue that the search_path finds past its first schema: every command, migrate included,
// refuses it in one line that names its schema, and enqueues nothing.
func TestQueuePastTheFirstSchema(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	emptySchemaURL(t, q)
	dbURL := withSchema(q.URL, q.Schema+"_empty%2C"+q.Schema)
	for _, args := range [][]string{{"status"}, {"enqueue"}, {"work", "--exec", "true"}, {"migrate"}} {
		r := runBin(t, `{"key":"k","seq":1}`+"\n", append(args, "--database-url", dbURL)...)
		requireOneLineError(t, r)
		require.Contains(t, r.stderr, fmt.Sprintf("the search_path finds the queue in schema %q", q.Schema), "ordered %s", args[0])
	}
	require.Zero(t, jobCount(t, q.Pool))
}
