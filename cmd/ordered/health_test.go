package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered/orderedtest"
)

// probe GETs path on addr and returns the status code and body (0 and the error when there
// is no answer).
func probe(addr, path string) (int, string) {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// /healthz is liveness: 200 while the worker runs, whatever the database does. /readyz is
// readiness: 503 with the reason while the database is unreachable (cut off by a fault proxy)
// and while the worker drains, 200 otherwise.
func TestWorkHealthAndReadiness(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	through, proxy := proxied(t, q)
	w := startCLI(t, "work", "--database-url", through.URL, "--poll", "50ms", "--metrics-addr", "127.0.0.1:0",
		"--exec", `echo $$ > "$ORDERED_TEST_DIR/pid"; while [ ! -e "$ORDERED_TEST_DIR/release" ]; do sleep 0.05; done`)
	addr := w.metricsAddr(t)
	requireProbe := func(path string, code int, body string) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got, gotBody := probe(addr, path)
			assert.Equal(c, code, got, gotBody)
			assert.Contains(c, gotBody, body)
		}, 30*time.Second, 50*time.Millisecond, "%s; worker stderr:\n%s", path, w.stderr())
	}
	requireProbe("/readyz", http.StatusOK, "ok")
	requireProbe("/healthz", http.StatusOK, "ok")

	proxy.Blackhole()
	requireProbe("/readyz", http.StatusServiceUnavailable, "database unreachable: ")
	requireProbe("/healthz", http.StatusOK, "ok")
	proxy.Heal()
	requireProbe("/readyz", http.StatusOK, "ok")

	// A running job keeps the worker draining after SIGTERM until it is released.
	enqueueCLI(t, q, `{"key":"k","seq":1}`+"\n")
	w.waitPID(t, "pid")
	w.signal(t, syscall.SIGTERM)
	requireProbe("/readyz", http.StatusServiceUnavailable, "draining")
	requireProbe("/healthz", http.StatusOK, "ok")
	require.NoError(t, os.WriteFile(filepath.Join(w.dir, "release"), nil, 0o644))
	require.Zero(t, w.wait(t, 30*time.Second), w.stderr())
	require.Equal(t, []string{"k/1 done attempts=1"}, jobStates(t, q.Pool))
}
