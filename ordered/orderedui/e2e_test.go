package orderedui_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/orderedui"
	"github.com/orderedq/ordered/policy"
)

// do runs steps in the tab, failing t on error.
func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx, steps...))
}

// text returns the text of the first element sel matches (read by a script, so that it never
// holds a node of a page the tab has left).
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector(%q).innerText`, sel)))
	require.NoError(t, err, sel)
	return strings.TrimSpace(s)
}

// click clicks the first element sel matches, found and clicked in one script: a page's live
// region is rendered anew every refresh, so a node found by one call may be gone by the next.
func click(t *testing.T, ctx context.Context, sel string) {
	t.Helper()
	found := eval[bool](t, ctx, fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (e) e.click(); return e !== null })()`, sel))
	require.True(t, found, "nothing to click: %s", sel)
}

// eval evaluates a JavaScript expression in the tab (awaiting a promise).
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	return v
}

// waitFor polls a JavaScript condition in the tab until it holds.
func waitFor(t *testing.T, ctx context.Context, cond string) {
	t.Helper()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingInterval(20*time.Millisecond)))
	require.NoError(t, err, "waiting for %s", cond)
}

// startWorker runs a real worker with h until t ends.
func startWorker(t *testing.T, c *ordered.Client, h ordered.HandlerFunc) {
	t.Helper()
	w, err := c.NewWorker(h, &ordered.WorkerConfig{Workers: 4, PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, w.Stop(ctx))
	})
}

func TestBrowserReplayThroughTheButtonDrainsTheKey(t *testing.T) {
	t.Parallel()
	b := setup(t, policy.Block, &orderedui.Config{SampleInterval: 50 * time.Millisecond}, orderedui.Auth{})
	// The notify- keys fail under the skip policy, for the failed jobs' page.
	skipNotify, err := ordered.NewClient(b.q.Pool, &ordered.Config{
		Policy: policy.ByKeyPrefix(policy.Block, map[string]policy.Decision{"notify-": policy.Skip})})
	require.NoError(t, err)
	var failing atomic.Bool
	failing.Store(true)
	startWorker(t, skipNotify, func(_ context.Context, j *ordered.Job) error {
		switch {
		case j.Key == "cust-42" && j.Seq == 2 && failing.Load():
			return ordered.Permanent(errors.New("payment gateway: card declined (code 51)"))
		case strings.HasPrefix(j.Key, "notify-") && j.Seq == 1:
			return ordered.Permanent(fmt.Errorf("smtp: 550 mailbox %s unavailable", j.Key))
		}
		return nil
	})
	ids := enqueue(t, b.client, "cust-42", 0, 1, 2, 3, 4, 5)
	for i := range 6 {
		enqueue(t, b.client, fmt.Sprintf("notify-%d", i), 0, 1, 2)
		enqueue(t, b.client, fmt.Sprintf("cust-%d", 100+i), 0, 1, 2, 3)
	}

	ctx := tab(t)
	check := noDialogs(t, ctx)
	row := `tr.blocked-key[data-key="cust-42"]`
	do(t, ctx, chromedp.Navigate(b.srv.URL+"/blocked"), chromedp.WaitVisible(chromedp.CSS(row)))
	require.Contains(t, text(t, ctx, row), "card declined (code 51)")
	require.Contains(t, text(t, ctx, row), "3 jobs", "seqs 3 to 5 wait behind it")
	screenshot(t, ctx, "blocked")

	do(t, ctx, chromedp.Navigate(b.srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#counts")))
	waitFor(t, ctx, `document.querySelector('#count-blocked-keys').textContent === '1' && document.querySelectorAll('svg.chart polyline').length === 1`)
	screenshot(t, ctx, "overview")
	do(t, ctx, chromedp.Navigate(b.srv.URL+"/failed?prefix=notify-"), chromedp.WaitVisible(chromedp.CSS("#failed-jobs")))
	screenshot(t, ctx, "failed")
	do(t, ctx, chromedp.Navigate(fmt.Sprintf("%s/jobs/%d", b.srv.URL, ids[2])), chromedp.WaitVisible(chromedp.CSS("#payload")))
	screenshot(t, ctx, "job")

	failing.Store(false)
	do(t, ctx, chromedp.Navigate(b.srv.URL+"/blocked"), chromedp.WaitVisible(chromedp.CSS(row)))
	click(t, ctx, row+" button.replay")
	do(t, ctx, chromedp.WaitVisible(chromedp.CSS("#summary")))
	require.Equal(t, "Replayed 1 of 1 job.", text(t, ctx, "#summary"))

	// The key drains before our eyes: the timeline refreshes itself.
	do(t, ctx, chromedp.Navigate(b.srv.URL+"/keys?key=cust-42"), chromedp.WaitVisible(chromedp.CSS("#timeline")))
	waitFor(t, ctx, `(() => { const r = [...document.querySelectorAll('#timeline tr.job')];
		return r.length === 6 && r.every(e => e.dataset.status === 'done'); })()`)
	screenshot(t, ctx, "timeline")
	do(t, ctx, chromedp.Navigate(b.srv.URL+"/blocked"), chromedp.WaitVisible(chromedp.CSS("#no-blocked")))
	check()
}

func TestBrowserOutOfOrderReplayNeedsASecondConfirmation(t *testing.T) {
	t.Parallel()
	b := setup(t, policy.Skip, nil, orderedui.Auth{})
	ids := enqueue(t, b.client, "acct-7", 0, 1, 2)
	settle(t, b.client, failing("acct-7", 0, "ledger: account frozen"))

	ctx := tab(t)
	do(t, ctx, chromedp.Navigate(fmt.Sprintf("%s/jobs/%d", b.srv.URL, ids[0])),
		chromedp.WaitVisible(chromedp.CSS("button.replay")))
	click(t, ctx, "button.replay")
	do(t, ctx, chromedp.WaitVisible(chromedp.CSS("#force-form")))
	require.Equal(t, "Replayed 0 of 1 job; 1 refused.", text(t, ctx, "#summary"))
	require.Contains(t, text(t, ctx, "#refused"), "would run it after later jobs")
	j, err := b.client.Job(ctxOf(t), ids[0])
	require.NoError(t, err)
	require.Equal(t, ordered.JobFailed, j.Status, "the refused replay changed nothing")
	screenshot(t, ctx, "force")

	click(t, ctx, "#force")
	do(t, ctx, chromedp.WaitVisible(chromedp.CSS("#done")))
	require.Equal(t, "Replayed 1 of 1 job.", text(t, ctx, "#summary"))
	require.Contains(t, text(t, ctx, "#done"), "forced")
	j, err = b.client.Job(ctxOf(t), ids[0])
	require.NoError(t, err)
	require.Equal(t, ordered.JobQueued, j.Status)
	require.Zero(t, j.Attempts)
}

// forgedPost sends an action from the page's own origin, with its cookies but without the
// form's CSRF field unless csrf is true (then it reads the field off the page), and returns
// the response's status.
func forgedPost(t *testing.T, ctx context.Context, path string, id int64, csrf bool) int {
	t.Helper()
	field := `''`
	if csrf {
		field = `(document.querySelector('input[name=csrf]') || {}).value || ''`
	}
	return eval[int](t, ctx, fmt.Sprintf(`fetch(%q, {method: 'POST', body: new URLSearchParams({id: '%d', csrf: %s})}).then(r => r.status)`,
		path, id, field))
}

func TestBrowserReadOnlyShowsNoButtonAndRefusesAForgedPost(t *testing.T) {
	t.Parallel()
	b := setup(t, policy.Block, &orderedui.Config{ReadOnly: true}, orderedui.Auth{})
	id := blockKey(t, b, "ro-1", 3)
	ctx := tab(t)
	for _, p := range []string{"/blocked", "/failed", fmt.Sprintf("/jobs/%d", id), "/keys?key=ro-1", "/"} {
		do(t, ctx, chromedp.Navigate(b.srv.URL+p), chromedp.WaitVisible(chromedp.CSS("main h1")))
		require.Equal(t, 0, eval[int](t, ctx, `document.querySelectorAll('form[method=post], button.replay, button.skip, #select-all').length`), p)
	}
	do(t, ctx, chromedp.Navigate(b.srv.URL+"/blocked"), chromedp.WaitVisible(chromedp.CSS(`tr.blocked-key[data-key="ro-1"]`)))
	require.Equal(t, "read-only", text(t, ctx, "header .mode"))
	require.Equal(t, 403, forgedPost(t, ctx, "/replay", id, false))
	require.Equal(t, 403, forgedPost(t, ctx, "/skip", id, false))
	j, err := b.client.Job(ctxOf(t), id)
	require.NoError(t, err)
	require.Equal(t, ordered.JobBlocked, j.Status)
}

func TestBrowserRefusesAPostWithoutTheCSRFToken(t *testing.T) {
	t.Parallel()
	b := setup(t, policy.Block, nil, orderedui.Auth{})
	id := blockKey(t, b, "csrf-1", 3)
	ctx := tab(t)
	do(t, ctx, chromedp.Navigate(b.srv.URL+"/blocked"), chromedp.WaitVisible(chromedp.CSS(`tr.blocked-key[data-key="csrf-1"]`)))
	require.Equal(t, 403, forgedPost(t, ctx, "/skip", id, false), "the cookie alone is not enough")
	j, err := b.client.Job(ctxOf(t), id)
	require.NoError(t, err)
	require.Equal(t, ordered.JobBlocked, j.Status)
	require.Equal(t, 200, forgedPost(t, ctx, "/skip", id, true), "with the page's token it is the page's own action")
	j, err = b.client.Job(ctxOf(t), id)
	require.NoError(t, err)
	require.Equal(t, ordered.JobFailed, j.Status)
}

func TestBrowserRefusesAnUnauthenticatedRequest(t *testing.T) {
	t.Parallel()
	b := setup(t, policy.Block, nil, orderedui.Auth{Token: "tok-" + strings.Repeat("x", 20)})
	ctx := tab(t)
	do(t, ctx, chromedp.Navigate(b.srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("body")))
	require.Contains(t, text(t, ctx, "body"), "authentication required")
	require.Equal(t, 0, eval[int](t, ctx, `document.querySelectorAll('#counts').length`))
	do(t, ctx, chromedp.Navigate(b.srv.URL+"/?token="+url.QueryEscape("tok-"+strings.Repeat("x", 20))),
		chromedp.WaitVisible(chromedp.CSS("#counts")))
	loc, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	require.NotContains(t, loc, "token", "the token leaves the address bar")
}

func TestBrowserShowsAScriptKeyAsText(t *testing.T) {
	t.Parallel()
	b := setup(t, policy.Block, nil, orderedui.Auth{})
	key := `<script>alert(1)</script><img src=x onerror=alert(2)>"'&`
	id := blockKey(t, b, key, 3)
	ctx := tab(t)
	check := noDialogs(t, ctx)
	pages := map[string]string{
		"/blocked":                          `#blocked-keys td.key a`,
		"/":                                 `tr.blocked-key td.key a`,
		"/failed":                           `#failed-jobs td.key a`,
		fmt.Sprintf("/jobs/%d", id):         `#job-key a`,
		"/keys?key=" + url.QueryEscape(key): `#key-input`,
	}
	for p, sel := range pages {
		do(t, ctx, chromedp.Navigate(b.srv.URL+p), chromedp.WaitVisible(chromedp.CSS(sel)))
		var got string
		if sel == "#key-input" {
			v, err := chromedp.Run(ctx, chromedp.Value(chromedp.CSS(sel)))
			require.NoError(t, err)
			got = v
			require.Equal(t, 3, eval[int](t, ctx, `document.querySelectorAll('#timeline tr.job').length`))
		} else {
			got = text(t, ctx, sel)
		}
		require.Equal(t, key, got, p)
		require.Equal(t, 0, eval[int](t, ctx, `document.querySelectorAll('main script, main img').length`), p)
	}
	check()
}

// While the live part cannot be fetched (here the server answers 503, as it does when the
// database does not answer), the page says since when and why, and recovers by itself.
func TestBrowserSaysWhenTheLivePartIsNotRefreshed(t *testing.T) {
	t.Parallel()
	b := setup(t, policy.Block, nil, orderedui.Auth{})
	ui, err := orderedui.New(b.client, &orderedui.Config{RefreshInterval: 200 * time.Millisecond,
		StatsMaxAge: time.Nanosecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	t.Cleanup(ui.Close)
	var down atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() && r.URL.Query().Get("fragment") == "1" {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		ui.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	ctx := tab(t)
	do(t, ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#counts")))
	waitFor(t, ctx, `document.querySelector('[data-live]').dataset.refreshed >= 1`)
	require.True(t, eval[bool](t, ctx, `document.querySelector('.stale-note').hidden`))
	down.Store(true)
	waitFor(t, ctx, `!document.querySelector('.stale-note').hidden`)
	note := text(t, ctx, ".stale-note")
	require.Regexp(t, `^Not refreshed since .+: the dashboard answered HTTP 503\. What is shown below may be out of date\.$`, note)
	require.True(t, eval[bool](t, ctx, `document.querySelector('[data-live]').classList.contains('stale')`))
	down.Store(false)
	waitFor(t, ctx, `document.querySelector('.stale-note').hidden && !document.querySelector('[data-live]').classList.contains('stale')`)
}
