package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered/orderedtest"
)

// plainBin builds, once, the binary the scenario tests run: without the race detector, which
// would slow these long runs several times over (the CLI tests' cliBin has it).
// It goes beside cliBin, in the directory TestMain removes.
var plainBin = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(filepath.Dir(cliBin), "ordered-plain")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	return bin, build.Run()
})

func scenarioBin(t *testing.T) string {
	t.Helper()
	bin, err := plainBin()
	require.NoError(t, err)
	return bin
}

// The demo's short form runs end to end — workers killed and replaced included — and reports a
// clean per-key order check.
func TestDemoShortIsClean(t *testing.T) {
	t.Parallel()
	bin := scenarioBin(t)

	for _, pol := range []string{"block", "skip"} {
		var out bytes.Buffer
		demo := exec.Command(bin, "demo", "--short", "--policy", pol, "--database-url", orderedtest.DatabaseURL())
		demo.Stdout, demo.Stderr = &out, &out
		require.NoError(t, demo.Run(), out.String())
		require.Contains(t, out.String(), "SIGKILL worker-1", out.String())
		require.Contains(t, out.String(), "0 order violations, 0 duplicate effects, 0 done jobs without effect", out.String())
		require.Contains(t, out.String(), "policy "+pol+":", out.String())
		require.Contains(t, out.String(), "result          clean", out.String())
		if pol == "block" {
			require.Contains(t, out.String(), "(--keep keeps the queue to replay or skip it)", out.String())
		}
	}
}

// With no DATABASE_URL and nothing on the local port, the demo starts a private PostgreSQL
// cluster of its own, and removes it afterwards.
func TestDemoStartsPrivateClusterWithoutServer(t *testing.T) {
	t.Parallel()
	bin := scenarioBin(t)
	// A TMPDIR of its own, open to the unprivileged user the cluster runs as.
	tmp, err := os.MkdirTemp("", "ordered-demo-tmp-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(tmp) })
	require.NoError(t, os.Chmod(tmp, 0o755))
	var out bytes.Buffer
	demo := exec.Command(bin, "demo", "--short")
	demo.Env = append(withoutEnv(os.Environ(), "DATABASE_URL"),
		"ORDERED_LOCAL_URL=postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2",
		"TMPDIR="+tmp)
	demo.Stdout, demo.Stderr = &out, &out
	require.NoError(t, demo.Run(), out.String())
	require.Contains(t, out.String(), "starting a private PostgreSQL cluster", out.String())
	require.Contains(t, out.String(), "result          clean", out.String())
	require.NotContains(t, out.String(), "--keep", "nothing can be kept in a private cluster")
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.Empty(t, left, "the private cluster's directory was not removed")

	// --keep is refused there, before anything is enqueued.
	out.Reset()
	keep := exec.Command(bin, "demo", "--short", "--keep")
	keep.Env, keep.Stdout, keep.Stderr = demo.Env, &out, &out
	require.Error(t, keep.Run())
	require.Contains(t, out.String(), "ordered: --keep: the private cluster goes at the end of the run", out.String())
	require.NotContains(t, out.String(), "enqueued", out.String())
	left, err = os.ReadDir(tmp)
	require.NoError(t, err)
	require.Empty(t, left, "the private cluster's directory was not removed")
}

// demo --keep leaves its queue, and says how to reach it: the commands it names work on it.
func TestDemoKeepLeavesAReachableQueue(t *testing.T) {
	t.Parallel()
	bin := scenarioBin(t)
	var out bytes.Buffer
	demo := exec.Command(bin, "demo", "--short", "--keep", "--database-url", orderedtest.DatabaseURL())
	demo.Stdout, demo.Stderr = &out, &out
	require.NoError(t, demo.Run(), out.String())
	kept := regexp.MustCompile(`kept schema (\S+): ordered status --database-url '([^']+)'`).FindStringSubmatch(out.String())
	require.NotNil(t, kept, out.String())
	t.Cleanup(func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, orderedtest.DatabaseURL())
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{kept[1]}.Sanitize()+" CASCADE")
		require.NoError(t, err)
	})
	require.Regexp(t, `\(ordered replay \d+ / ordered skip \d+ in the kept schema\)`, out.String())

	r := runCLI(t, kept[2], "", "status", "--json")
	require.Zero(t, r.code, r.stderr)
	var status struct {
		Blocked int `json:"blocked"`
		Done    int `json:"done"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &status), r.stdout)
	require.Equal(t, 1, status.Blocked, "the short stream's poison event blocks its customer")
	require.Positive(t, status.Done)
}

func withoutEnv(env []string, name string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// demo --ui keeps the demo's queue after the report and serves the dashboard over it until
// interrupted; then it drops the queue and exits cleanly.
func TestDemoUIServesTheDemosQueue(t *testing.T) {
	t.Parallel()
	bin := scenarioBin(t)
	outFile := filepath.Join(t.TempDir(), "demo.out")
	f, err := os.Create(outFile)
	require.NoError(t, err)
	defer f.Close()
	output := func() string { b, _ := os.ReadFile(outFile); return string(b) }
	demo := exec.Command(bin, "demo", "--short", "--ui", "--ui-addr", "127.0.0.1:0",
		"--database-url", orderedtest.DatabaseURL())
	demo.Stdout, demo.Stderr = f, f
	require.NoError(t, demo.Start())
	exited := make(chan error, 1)
	go func() { exited <- demo.Wait() }()
	t.Cleanup(func() {
		_ = demo.Process.Kill()
		<-exited
	})

	serving := regexp.MustCompile(`serving on (http://\S+)`)
	var url string
	for url == "" {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the demo exited (%v) without serving the dashboard:\n%s", err, output())
		case <-time.After(50 * time.Millisecond):
		}
		if m := serving.FindStringSubmatch(output()); m != nil {
			url = m[1]
		}
	}
	require.Contains(t, output(), "result          clean")

	res, err := http.Get(url + "blocked")
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	// The short stream's poison customer, blocked under the default policy.
	require.Contains(t, string(body), "cust-0013", "the blocked keys page does not show the demo's blocked key")

	require.NoError(t, demo.Process.Signal(os.Interrupt))
	err = <-exited
	exited <- err
	require.NoError(t, err, output())
}
