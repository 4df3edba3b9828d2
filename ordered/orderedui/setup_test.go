package orderedui_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/orderedtest"
	"github.com/orderedq/ordered/ordered/orderedui"
	"github.com/orderedq/ordered/policy"
)

// bundle is a queue, a client on it and a dashboard server over it.
type bundle struct {
	q      *orderedtest.Queue
	client *ordered.Client
	srv    *httptest.Server
	http   *http.Client
}

// setup starts a dashboard with cfg on a fresh queue whose client uses pol.
func setup(t *testing.T, pol policy.Decision, cfg *orderedui.Config, auth orderedui.Auth) *bundle {
	t.Helper()
	q := orderedtest.New(t)
	client := q.Client(t, &ordered.Config{Policy: policy.Always(pol), Lease: 30 * time.Second})
	c := orderedui.Config{}
	if cfg != nil {
		c = *cfg
	}
	// Pages refresh often and count anew each time, so that a test sees its own changes.
	c.RefreshInterval, c.StatsMaxAge = 200*time.Millisecond, time.Nanosecond
	c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ui, err := orderedui.New(client, &c)
	require.NoError(t, err)
	t.Cleanup(ui.Close)
	srv := httptest.NewServer(orderedui.RequireAuth(ui, auth))
	t.Cleanup(srv.Close)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &bundle{q: q, client: client, srv: srv, http: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// enqueue enqueues seqs of key, kind "test", and returns their job IDs.
func enqueue(t *testing.T, c *ordered.Client, key string, seqs ...int64) []int64 {
	t.Helper()
	evs := make([]ordered.Event, len(seqs))
	for i, s := range seqs {
		p, _ := json.Marshal(map[string]any{"key": key, "seq": s, "note": "<b>not bold</b>"})
		evs[i] = ordered.Event{Key: key, Seq: s, Kind: "test", Payload: p}
	}
	res, err := c.EnqueueMany(ctxOf(t), evs)
	require.NoError(t, err)
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.ID
	}
	return ids
}

// settle claims every job that can run and completes it, or fails it for good (the client's
// policy decides what that does to its key) when fail says so, until none can run.
func settle(t *testing.T, c *ordered.Client, fail func(*ordered.Job) string) {
	t.Helper()
	ctx := ctxOf(t)
	for {
		jobs, err := c.Claim(ctx, 100)
		require.NoError(t, err)
		if len(jobs) == 0 {
			return
		}
		for _, j := range jobs {
			if msg := fail(j); msg != "" {
				_, err = c.Fail(ctx, j, errors.New(msg))
			} else {
				err = c.Complete(ctx, j)
			}
			require.NoError(t, err)
		}
	}
}

// failing fails the job of key at seq with msg and completes the others.
func failing(key string, seq int64, msg string) func(*ordered.Job) string {
	return func(j *ordered.Job) string {
		if j.Key == key && j.Seq == seq {
			return msg
		}
		return ""
	}
}
