// Package pgbouncer runs a private PgBouncer in front of the test server, for the tests that
// check `ordered` behind a connection pooler in session and transaction mode.
//
// New starts one for a test on a free port of 127.0.0.1 with a configuration in a temporary
// directory: pool_mode as asked, every database forwarded to the server of
// orderedtest.DatabaseURL(), trust authentication for the users it knows, no unix socket, the
// log in the directory. Server pools are small (PoolSize) so that in transaction mode the
// clients really share server connections; in session mode each client connection holds a
// server connection while it is open, so a test's connections through it must not exceed
// SessionPoolSize (more wait for one to close).
//
// PgBouncer refuses startup parameters it does not know, search_path among them, so a queue's
// schema cannot be chosen in the URL. Instead New creates a LOGIN role per schema it is given,
// named after the schema, whose search_path is that schema; URL connects as that role. The
// roles are dropped (after reassigning what they own) when the test ends.
//
// PgBouncer refuses to run as root: a root caller runs it as the user "postgres". When no
// pgbouncer binary is found and the caller is root, New installs it with apt-get; when none can
// be had, the test fails.
package pgbouncer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orderedq/ordered/ordered/orderedtest"
)

// Mode is PgBouncer's pool_mode.
type Mode string

// The pool modes under test.
const (
	Session     Mode = "session"
	Transaction Mode = "transaction"
)

// Server connections per database and user, in each mode.
const (
	PoolSize        = 4
	SessionPoolSize = 16
)

// startTimeout bounds how long a start waits for PgBouncer to accept connections.
const startTimeout = 30 * time.Second

// PgBouncer is a running private PgBouncer.
type PgBouncer struct {
	t       testing.TB
	bin     string
	dir     string
	config  string
	logFile string
	port    int
	cred    *syscall.Credential // nil unless the caller is root

	mu     sync.Mutex
	proc   *os.Process // nil while stopped
	exited chan error  // receives the process's exit
}

// New starts a PgBouncer in mode for t, with a role for each of schemas (see the package doc),
// and stops it and drops the roles when t ends.
func New(t testing.TB, mode Mode, schemas ...string) *PgBouncer {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatalf("pgbouncer: %v", err)
	}
	server, err := url.Parse(orderedtest.DatabaseURL())
	if err != nil {
		t.Fatalf("pgbouncer: DATABASE_URL: %v", err)
	}
	b := &PgBouncer{t: t, bin: bin}
	if os.Geteuid() == 0 {
		if b.cred, err = postgresUser(); err != nil {
			t.Fatalf("pgbouncer: %v", err)
		}
	}
	createRoles(t, schemas) // first: its cleanup must run after PgBouncer's
	if b.dir, err = os.MkdirTemp("", "ordered-pgbouncer-"); err != nil {
		t.Fatalf("pgbouncer: %v", err)
	}
	t.Cleanup(func() {
		b.Close()
		if t.Failed() {
			t.Logf("pgbouncer log:\n%s", b.logTail())
		}
		os.RemoveAll(b.dir)
	})

	users := append([]string{server.User.Username()}, schemas...)
	var auth strings.Builder
	for _, u := range users {
		fmt.Fprintf(&auth, "%q \"\"\n", u)
	}
	if b.port, err = freePort(); err != nil {
		t.Fatalf("pgbouncer: %v", err)
	}
	b.config = filepath.Join(b.dir, "pgbouncer.ini")
	b.logFile = filepath.Join(b.dir, "pgbouncer.log")
	host, port := server.Hostname(), server.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "5432"
	}
	poolSize := PoolSize
	if mode == Session {
		poolSize = SessionPoolSize
	}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 500
logfile = %s
`, host, port, b.port, filepath.Join(b.dir, "users.txt"), mode, poolSize, b.logFile)
	for name, text := range map[string]string{"users.txt": auth.String(), "pgbouncer.ini": ini} {
		if err := os.WriteFile(filepath.Join(b.dir, name), []byte(text), 0o644); err != nil {
			t.Fatalf("pgbouncer: %v", err)
		}
	}
	if b.cred != nil {
		if err := os.Chown(b.dir, int(b.cred.Uid), int(b.cred.Gid)); err != nil {
			t.Fatalf("pgbouncer: %v", err)
		}
	}
	if err := b.start(); err != nil {
		t.Fatalf("pgbouncer: %v", err)
	}
	return b
}

// URL connects through the PgBouncer as the role of schema (one given to New), whose
// search_path is schema; an empty schema connects as the server URL's own user.
func (b *PgBouncer) URL(schema string) string {
	u, _ := url.Parse(orderedtest.DatabaseURL())
	if schema != "" {
		u.User = url.User(schema)
	}
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port))
	q := u.Query()
	q.Del("options")
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return u.String()
}

// Port is the port PgBouncer listens on.
func (b *PgBouncer) Port() int { return b.port }

// Restart kills PgBouncer (SIGKILL: its clients' connections and their server connections
// break mid-statement) and starts it again on the same port.
func (b *PgBouncer) Restart() {
	b.t.Helper()
	b.Close()
	if err := b.start(); err != nil {
		b.t.Fatalf("pgbouncer: restart: %v", err)
	}
}

// Close kills PgBouncer and waits for it to exit. It may be called more than once.
func (b *PgBouncer) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.proc == nil {
		return
	}
	_ = b.proc.Kill()
	<-b.exited
	b.proc = nil
}

func (b *PgBouncer) start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	cmd := exec.Command(b.bin, b.config)
	cmd.Dir = b.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: b.cred, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("exited at start (%v):\n%s", err, b.logTail())
		default:
		}
		err := b.ping()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("not accepting connections after %v: %v\n%s", startTimeout, err, b.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.proc, b.exited = cmd.Process, exited
	return nil
}

// ping connects through PgBouncer and runs a statement on the server.
func (b *PgBouncer) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.URL(""))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "SELECT 1")
	return err
}

func (b *PgBouncer) logTail() string {
	data, err := os.ReadFile(b.logFile)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// binary finds pgbouncer on PATH or in /usr/sbin, installing the OS package once when it is
// missing and the caller is root.
func binary() (string, error) {
	binOnce.Do(func() {
		if binPath, binErr = find(); binErr == nil || os.Geteuid() != 0 {
			return
		}
		// Test processes of several packages start at once: the first installs, the others
		// wait for it and find the binary, rather than meet apt's lock and fail.
		unlock, err := lockFile(filepath.Join(os.TempDir(), "ordered-pgbouncer-install.lock"))
		if err != nil {
			binErr = err
			return
		}
		defer unlock()
		if binPath, binErr = find(); binErr == nil {
			return
		}
		install := exec.Command("sh", "-c", "apt-get install -y pgbouncer || (apt-get update && apt-get install -y pgbouncer)")
		install.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := install.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("no pgbouncer binary, and apt-get install -y pgbouncer failed: %v\n%s", err, out)
			return
		}
		binPath, binErr = find()
	})
	return binPath, binErr
}

// lockFile takes an exclusive lock on the file at path, across processes, and returns its
// release.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

func find() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", errors.New("no pgbouncer binary on PATH or in /usr/sbin (install the pgbouncer package)")
}

// postgresUser is the user a root caller runs PgBouncer as.
func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, but PgBouncer refuses root and there is no user postgres: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil || uid == 0 {
		return nil, fmt.Errorf("user postgres (uid %s) cannot run PgBouncer: %v", u.Uid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// createRoles creates a LOGIN role named after each schema whose search_path is that schema,
// and drops them when t ends (after New's cleanup has stopped PgBouncer: cleanups run last
// registered first).
func createRoles(t testing.TB, schemas []string) {
	t.Helper()
	if len(schemas) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, orderedtest.DatabaseURL())
	if err != nil {
		t.Fatalf("pgbouncer: %v", err)
	}
	defer admin.Close(ctx)
	for _, s := range schemas {
		// Identifiers cannot be parameters; the names come from orderedtest, not from input.
		// SUPERUSER: the role runs migrations and owns what they create in its schema.
		id := pgx.Identifier{s}.Sanitize()
		if _, err := admin.Exec(ctx, "CREATE ROLE "+id+" LOGIN SUPERUSER; ALTER ROLE "+id+" SET search_path = "+id); err != nil {
			t.Fatalf("pgbouncer: create role %s: %v", s, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, orderedtest.DatabaseURL())
		if err != nil {
			t.Errorf("pgbouncer: drop roles: %v", err)
			return
		}
		defer conn.Close(ctx)
		for _, s := range schemas {
			id := pgx.Identifier{s}.Sanitize()
			if _, err := conn.Exec(ctx, "REASSIGN OWNED BY "+id+" TO CURRENT_USER; DROP OWNED BY "+id+"; DROP ROLE "+id); err != nil {
				t.Errorf("pgbouncer: drop role %s: %v", s, err)
			}
		}
	})
}

// freePort returns a TCP port of 127.0.0.1 that nothing listens on right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
