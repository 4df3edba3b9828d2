package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/orderedq/ordered/ordered/orderedtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The service as a client sees it: several customers post reports at once; every report is
// generated, each customer's in the order posted; a retried POST adds no job; the service
// stops gracefully when its context (the signal) ends.
func TestReportsRunInOrderPerCustomer(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base, stop := startService(t, ctx, q.URL)
	api := newAPI(t, base)

	customers := []string{"acme", "globex", "initech", "umbrella"}
	const perCustomer = 5
	posted := make(map[string][]request) // by customer, in posting order
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range customers {
		wg.Go(func() {
			for i := range perCustomer {
				kind := []string{"daily", "monthly"}[i%2]
				r, status, err := api.post(ctx, c, kind, "")
				if !assertPosted(t, err, status, http.StatusAccepted) {
					return
				}
				mu.Lock()
				posted[c] = append(posted[c], r)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.False(t, t.Failed())

	// A retried POST: its insert fails on the Idempotency-Key, and its job rolls back with it.
	first, status, err := api.post(ctx, "acme", "yearly", "acme-yearly-2026")
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, status)
	again, status, err := api.post(ctx, "acme", "yearly", "acme-yearly-2026")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, "a retried POST answers with the first request")
	require.Equal(t, first.ID, again.ID)
	posted["acme"] = append(posted["acme"], first)

	for c, rs := range posted {
		for i, r := range rs {
			require.Equal(t, int64(i+1), r.Seq, "%s's requests are numbered in posting order", c)
			done := api.waitDone(ctx, r.ID)
			require.Equal(t, fmt.Sprintf("%s report #%d for %s", r.Kind, r.Seq, c), done.Result)
		}
	}

	// One job per request, and none for the retried POST: acme's jobs are seqs 1..6.
	jobs, err := q.Jobs(ctx)
	require.NoError(t, err)
	byKey := make(map[string][]int64)
	for _, j := range jobs {
		require.Equal(t, "done", j.Status, "job %s/%d", j.Key, j.Seq)
		byKey[j.Key] = append(byKey[j.Key], j.Seq)
	}
	for c, rs := range posted {
		want := make([]int64, len(rs))
		for i, r := range rs {
			want[i] = r.Seq
		}
		require.Equal(t, want, byKey[c], "%s's jobs", c)
	}

	// Each customer's reports were generated in seq order.
	rows, err := q.Pool.Query(ctx, `SELECT customer, seq, generated_no FROM report_requests ORDER BY customer, seq`)
	require.NoError(t, err)
	last := make(map[string]int64)
	for rows.Next() {
		var c string
		var seq, gen int64
		require.NoError(t, rows.Scan(&c, &seq, &gen))
		require.Greater(t, gen, last[c], "%s's report %d was generated after its report %d", c, seq, seq-1)
		last[c] = gen
	}
	require.NoError(t, rows.Err())

	require.NoError(t, stop(), "graceful shutdown")
}

// A request for an unknown report is a 404, a malformed one a 400.
func TestReportsRejectBadRequests(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base, stop := startService(t, ctx, q.URL)
	api := newAPI(t, base)

	_, status, err := api.post(ctx, "", "daily", "")
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, status)
	_, status, err = api.post(ctx, strings.Repeat("k", 300), "daily", "") // over the key limit
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, status)
	_, status, err = api.post(ctx, "acme", "dai\x00ly", "") // PostgreSQL text holds no NUL
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, status)
	resp, err := api.get(ctx, base+"/reports/999")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusNotFound, resp.StatusCode)

	stats, err := q.Client(t, nil).Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, stats.Queued+stats.Running+stats.Done, "a refused request enqueues nothing")
	require.NoError(t, stop())
}

// startService runs the service on a free port and returns its base URL, and a stop that
// ends it as a signal would and returns run's error.
func startService(t *testing.T, ctx context.Context, dbURL string) (string, func() error) {
	t.Helper()
	runCtx, signal := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(runCtx, []string{"--database-url", dbURL, "--addr", "127.0.0.1:0", "--generate-time", "10ms"}, pw)
		pw.CloseWithError(io.EOF)
		done <- err
	}()
	lines := bufio.NewScanner(pr)
	var base string
	for base == "" && lines.Scan() {
		if addr, ok := strings.CutPrefix(lines.Text(), "reports: listening on "); ok {
			base = addr
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }() // the rest of the output
	if base == "" {
		signal()
		t.Fatalf("the service did not start: %v", <-done)
	}
	stopped := false
	stop := func() error {
		stopped = true
		signal()
		return <-done
	}
	t.Cleanup(func() {
		if !stopped {
			_ = stop()
		}
	})
	return base, stop
}

type api struct {
	t      *testing.T
	base   string
	client *http.Client
}

func newAPI(t *testing.T, base string) *api {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &api{t: t, base: base, client: &http.Client{Transport: tr}}
}

func (a *api) post(ctx context.Context, customer, kind, key string) (request, int, error) {
	body, _ := json.Marshal(map[string]string{"customer": customer, "kind": kind})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+"/reports", bytes.NewReader(body))
	if err != nil {
		return request{}, 0, err
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return request{}, 0, err
	}
	defer resp.Body.Close()
	var r request
	if resp.StatusCode < 300 {
		err = json.NewDecoder(resp.Body).Decode(&r)
	}
	return r, resp.StatusCode, err
}

func (a *api) get(ctx context.Context, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	return a.client.Do(req)
}

// waitDone polls GET /reports/{id} until the report is done.
func (a *api) waitDone(ctx context.Context, id int64) request {
	a.t.Helper()
	for {
		resp, err := a.get(ctx, fmt.Sprintf("%s/reports/%d", a.base, id))
		require.NoError(a.t, err, "report %d not done", id)
		var r request
		err = json.NewDecoder(resp.Body).Decode(&r)
		require.NoError(a.t, resp.Body.Close())
		require.NoError(a.t, err)
		if r.Status == "done" {
			return r
		}
		select {
		case <-ctx.Done():
			a.t.Fatalf("report %d not done: %v", id, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func assertPosted(t *testing.T, err error, status, want int) bool {
	if err != nil {
		t.Errorf("post: %v", err)
		return false
	}
	if status != want {
		t.Errorf("post: status %d, want %d", status, want)
		return false
	}
	return true
}
