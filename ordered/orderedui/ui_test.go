package orderedui_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/orderedui"
	"github.com/orderedq/ordered/policy"
)

// get fetches path and returns the status and body.
func (b *bundle) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := b.http.Get(b.srv.URL + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// post sends form to path with the headers and returns the status and body.
func (b *bundle) post(t *testing.T, path string, form url.Values, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := b.http.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`)

// csrf loads path and returns the CSRF token of its forms (the cookie is in the jar).
func (b *bundle) csrf(t *testing.T, path string) string {
	t.Helper()
	code, body := b.get(t, path)
	require.Equal(t, http.StatusOK, code, body)
	m := csrfRE.FindStringSubmatch(body)
	require.NotNil(t, m, "no CSRF field on %s", path)
	return m[1]
}

// blockKey enqueues seqs 0..n-1 of key, completes seq 0 and fails seq 1 under the block
// policy; it returns the blocked job's ID.
func blockKey(t *testing.T, b *bundle, key string, n int) int64 {
	t.Helper()
	seqs := make([]int64, n)
	for i := range seqs {
		seqs[i] = int64(i)
	}
	ids := enqueue(t, b.client, key, seqs...)
	settle(t, b.client, failing(key, 1, "card declined: <b>insufficient</b> funds"))
	j, err := b.client.Job(ctxOf(t), ids[1])
	require.NoError(t, err)
	require.Equal(t, ordered.JobBlocked, j.Status)
	return ids[1]
}

func TestPagesShowTheQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, policy.Block, nil, orderedui.Auth{})
	blocked := blockKey(t, b, "cust-1", 4)

	// The counts come from the sampler, which may have counted before the key was blocked;
	// they catch up within a sampling interval.
	var code int
	var body string
	require.Eventually(t, func() bool {
		code, body = b.get(t, "/")
		return code == http.StatusOK && strings.Contains(body, `id="count-blocked-keys">1<`)
	}, time.Minute, 50*time.Millisecond, "the overview never counted the blocked key")
	require.Contains(t, body, "cust-1")
	require.Contains(t, body, "<svg")

	code, body = b.get(t, "/blocked")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, fmt.Sprintf(`data-job="%d"`, blocked))
	require.Contains(t, body, "2 jobs") // seqs 2 and 3 wait behind it
	require.Contains(t, body, "card declined: &lt;b&gt;insufficient&lt;/b&gt; funds")

	code, body = b.get(t, fmt.Sprintf("/jobs/%d", blocked))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "&#34;note&#34;: &#34;&lt;b&gt;not bold&lt;/b&gt;&#34;", "the payload is indented JSON, escaped")
	require.Contains(t, body, `id="job-status">blocked<`)

	code, body = b.get(t, "/keys?key=cust-1")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, 4, strings.Count(body, `<tr class="job `), body)

	code, body = b.get(t, "/keys?key=cust")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `id="no-key"`)
	require.Contains(t, body, `href="/keys?key=cust-1"`, "keys that start with the query are offered")

	code, _ = b.get(t, "/jobs/999999")
	require.Equal(t, http.StatusNotFound, code)
	code, _ = b.get(t, "/failed?after_key=x&after_seq=nope")
	require.Equal(t, http.StatusBadRequest, code)
}

func TestActionWithoutCSRFTokenIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, policy.Block, nil, orderedui.Auth{})
	id := blockKey(t, b, "k", 3)
	tok := b.csrf(t, "/blocked")
	form := url.Values{"id": {fmt.Sprint(id)}}

	code, body := b.post(t, "/replay", form, nil)
	require.Equal(t, http.StatusForbidden, code, body)
	form.Set("csrf", strings.Repeat("0", 64))
	code, body = b.post(t, "/skip", form, nil)
	require.Equal(t, http.StatusForbidden, code, body)
	form.Set("csrf", tok)
	code, body = b.post(t, "/skip", form, http.Header{"Origin": {"http://evil.example"}})
	require.Equal(t, http.StatusForbidden, code, body)
	code, body = b.post(t, "/skip", form, http.Header{"Sec-Fetch-Site": {"cross-site"}})
	require.Equal(t, http.StatusForbidden, code, body)
	j, err := b.client.Job(ctxOf(t), id)
	require.NoError(t, err)
	require.Equal(t, ordered.JobBlocked, j.Status, "a refused action changed nothing")

	code, body = b.post(t, "/skip", form, http.Header{"Origin": {b.srv.URL}})
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "Skipped 1 of 1 job")
	j, err = b.client.Job(ctxOf(t), id)
	require.NoError(t, err)
	require.Equal(t, ordered.JobFailed, j.Status)
}

func TestReadOnlyShowsNoActionAndRefusesThem(t *testing.T) {
	t.Parallel()
	b := setup(t, policy.Block, &orderedui.Config{ReadOnly: true}, orderedui.Auth{})
	id := blockKey(t, b, "k", 3)
	for _, p := range []string{"/", "/blocked", "/failed", "/keys?key=k", fmt.Sprintf("/jobs/%d", id)} {
		code, body := b.get(t, p)
		require.Equal(t, http.StatusOK, code, p)
		require.NotContains(t, body, `method="post"`, p)
		require.NotContains(t, body, "<button class=", p)
	}
	// A forged request with a valid cookie and field is refused all the same.
	_, _ = b.get(t, "/")
	u, _ := url.Parse(b.srv.URL)
	var tok string
	for _, c := range b.http.Jar.Cookies(u) {
		if c.Name == "ordered_ui_csrf" {
			tok = c.Value
		}
	}
	require.NotEmpty(t, tok)
	for _, p := range []string{"/replay", "/skip"} {
		code, body := b.post(t, p, url.Values{"id": {fmt.Sprint(id)}, "csrf": {tok}}, nil)
		require.Equal(t, http.StatusForbidden, code, body)
		require.Contains(t, body, "read-only")
	}
	j, err := b.client.Job(ctxOf(t), id)
	require.NoError(t, err)
	require.Equal(t, ordered.JobBlocked, j.Status)
}

func TestAuthIsRequiredWhenSet(t *testing.T) {
	t.Parallel()
	b := setup(t, policy.Block, nil, orderedui.Auth{Token: "s3cret"})
	code, _ := b.get(t, "/")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = b.get(t, "/?token=wrong")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = b.get(t, "/static/app.js")
	require.Equal(t, http.StatusUnauthorized, code)

	resp, err := b.http.Get(b.srv.URL + "/blocked?token=s3cret")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/blocked", resp.Header.Get("Location"), "the token leaves the URL")
	code, _ = b.get(t, "/blocked") // the cookie now carries it
	require.Equal(t, http.StatusOK, code)

	// The redirect stays on this site, whatever the path looks like.
	resp, err = b.http.Get(b.srv.URL + "//evil.example/x?token=s3cret")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/evil.example/x", resp.Header.Get("Location"))

	for header, want := range map[string]int{
		"Bearer s3cret":  http.StatusOK,
		"bearer s3cret":  http.StatusOK, // the scheme's case does not matter
		"Bearer  s3cret": http.StatusOK, // nor how many spaces follow it
		"s3cret":         http.StatusUnauthorized,
		"Basic s3cret":   http.StatusUnauthorized,
	} {
		req, _ := http.NewRequest(http.MethodGet, b.srv.URL+"/", nil)
		req.Header.Set("Authorization", header)
		resp, err = http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, header)
	}

	basic := setup(t, policy.Block, nil, orderedui.Auth{User: "ops", Password: "pw"})
	code, _ = basic.get(t, "/")
	require.Equal(t, http.StatusUnauthorized, code)
	req, _ := http.NewRequest(http.MethodGet, basic.srv.URL+"/", nil)
	req.SetBasicAuth("ops", "pw")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestServeRefusesAPublicAddressWithoutCredentials(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0", "example.com:80"} {
		err := orderedui.Serve(context.Background(), nil, &orderedui.ServeConfig{Addr: addr})
		require.ErrorIs(t, err, orderedui.ErrAuthRequired, addr)
	}
	require.NoError(t, orderedui.CheckAddr("127.0.0.1:0", orderedui.Auth{}))
	require.NoError(t, orderedui.CheckAddr("[::1]:0", orderedui.Auth{}))
	require.NoError(t, orderedui.CheckAddr("localhost:0", orderedui.Auth{}))
	require.NoError(t, orderedui.CheckAddr("0.0.0.0:0", orderedui.Auth{Token: "t"}))
	require.EqualError(t, orderedui.CheckAddr("127.0.0.1", orderedui.Auth{}),
		`orderedui: address "127.0.0.1" is not HOST:PORT: missing port in address`)
	require.EqualError(t, orderedui.CheckAddr("localhost:8080x", orderedui.Auth{}),
		`orderedui: address "localhost:8080x": port "8080x" is not a port number`)
	require.EqualError(t, orderedui.CheckAddr("127.0.0.1:", orderedui.Auth{}),
		`orderedui: address "127.0.0.1:": port "" is not a port number`)
	require.NoError(t, orderedui.CheckAddr("127.0.0.1:http", orderedui.Auth{}), "a named port, as net.Listen takes")
}

// Text the database cannot hold in a query parameter is the request's fault (400, naming the
// parameter), not the dashboard's; a directory of the static files lists nothing.
func TestBadQueryTextIsABadRequest(t *testing.T) {
	t.Parallel()
	b := setup(t, policy.Block, nil, orderedui.Auth{})
	for path, param := range map[string]string{
		"/keys?key=%00":                      "key",
		"/failed?prefix=%00":                 "prefix",
		"/failed?kind=%FF":                   "kind",
		"/blocked?after_key=%00&after_seq=1": "after_key",
		"/failed?after_key=%FF&after_seq=1":  "after_key",
		"/failed?error=caf%C3%A9%00":         "error",
	} {
		code, body := b.get(t, path)
		require.Equal(t, http.StatusBadRequest, code, path)
		require.Contains(t, body, fmt.Sprintf("the query parameter &#34;%s&#34; is not valid text", param), path)
	}
	code, _ := b.get(t, "/static/")
	require.Equal(t, http.StatusNotFound, code)
	code, _ = b.get(t, "/static/app.js")
	require.Equal(t, http.StatusOK, code)
}

// A page that the database does not answer within RequestTimeout fails with 503 and says so,
// instead of holding the request and a connection; the dashboard logs it.
func TestPageTheDatabaseDoesNotAnswerIsUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t, policy.Block, &orderedui.Config{RequestTimeout: 2 * time.Second}, orderedui.Auth{})
	ids := enqueue(t, b.client, "k", 1)
	ctx := ctxOf(t)
	tx, err := b.q.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "LOCK TABLE ordered_heads IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)

	code, body := b.get(t, fmt.Sprintf("/jobs/%d", ids[0]))
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "the database did not answer in time")
	require.NoError(t, tx.Rollback(ctx))
	code, _ = b.get(t, fmt.Sprintf("/jobs/%d", ids[0]))
	require.Equal(t, http.StatusOK, code)
}

func TestServeServesUntilItsContextEnds(t *testing.T) {
	t.Parallel()
	b := setup(t, policy.Block, nil, orderedui.Auth{})
	ctx, cancel := context.WithCancel(ctxOf(t))
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		errc <- orderedui.Serve(ctx, b.client, &orderedui.ServeConfig{Addr: "127.0.0.1:0", Out: pw})
		pw.Close()
	}()
	line := make([]byte, 200)
	n, err := pr.Read(line)
	require.NoError(t, err)
	m := regexp.MustCompile(`serving on (http://\S+)`).FindStringSubmatch(string(line[:n]))
	require.NotNil(t, m, string(line[:n]))
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	resp, err := http.Get(m[1])
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	cancel()
	require.NoError(t, <-errc)
}

func TestFailedJobsPagesThroughEveryJobOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, policy.Skip, &orderedui.Config{PageSize: 7}, orderedui.Auth{})
	ctx := ctxOf(t)
	var evs []ordered.Event
	for k := range 5 {
		for s := range 5 {
			kind := "a"
			if s%2 == 1 {
				kind = "b"
			}
			evs = append(evs, ordered.Event{Key: fmt.Sprintf("acct-%d", k), Seq: int64(s), Kind: kind, Payload: []byte(`{}`)})
		}
	}
	evs = append(evs, ordered.Event{Key: "other", Seq: 0, Kind: "a", Payload: []byte(`{}`)})
	_, err := b.client.EnqueueMany(ctx, evs)
	require.NoError(t, err)
	settle(t, b.client, func(j *ordered.Job) string { return fmt.Sprintf("Boom at %s/%d", j.Key, j.Seq) })

	// The library: keyset pages with filters.
	var seen []string
	p := ordered.FailedJobsPageParams{KeyPrefix: "acct-", Limit: 7}
	for {
		page, err := b.client.FailedJobsPage(ctx, p)
		require.NoError(t, err)
		for _, j := range page.Jobs {
			seen = append(seen, fmt.Sprintf("%s/%d", j.Key, j.Seq))
		}
		if page.Next == nil {
			break
		}
		p.After = page.Next
	}
	require.Len(t, seen, 25)
	for i := range 25 {
		require.Equal(t, fmt.Sprintf("acct-%d/%d", i/5, i%5), seen[i])
	}
	page, err := b.client.FailedJobsPage(ctx, ordered.FailedJobsPageParams{Kind: "b", ErrorContains: "BOOM AT ACCT-3"})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 2)
	require.Equal(t, "acct-3", page.Jobs[0].Key)
	require.Equal(t, int64(1), page.Jobs[0].Seq)
	require.Equal(t, int64(3), page.Jobs[1].Seq)

	// The page: Next links walk them all.
	next, total := "/failed?prefix=acct-", 0
	for next != "" {
		code, body := b.get(t, strings.ReplaceAll(next, "&amp;", "&"))
		require.Equal(t, http.StatusOK, code, body)
		total += strings.Count(body, `<tr class="failed-job"`)
		m := regexp.MustCompile(`id="next" href="([^"]+)"`).FindStringSubmatch(body)
		next = ""
		if m != nil {
			next = m[1]
		}
	}
	require.Equal(t, 25, total)
}

func TestBulkActionsReportWhatWasDoneAndRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, policy.Block, nil, orderedui.Auth{})
	x := blockKey(t, b, "x", 3)
	y := blockKey(t, b, "y", 3)
	tok := b.csrf(t, "/failed")
	code, body := b.post(t, "/skip", url.Values{"csrf": {tok}, "id": {fmt.Sprint(x), fmt.Sprint(y), "999999"}}, nil)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "Skipped 2 of 3 jobs; 1 refused.")
	require.Contains(t, body, "#999999</a>: job 999999 does not exist")
	code, body = b.post(t, "/skip", url.Values{"csrf": {tok}, "id": {fmt.Sprint(x)}}, nil)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "Skipped 0 of 1 job; 1 left as they were.")
	code, body = b.post(t, "/skip", url.Values{"csrf": {tok}, "id": {"x1"}}, nil)
	require.Equal(t, http.StatusBadRequest, code, body)
}

func TestKeyTimelineShowsGapsInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, policy.Block, nil, orderedui.Auth{})
	enqueue(t, b.client, "g", 0, 1, 2, 5, 6, 9)
	settle(t, b.client, failing("g", 5, "bad"))
	tl, err := b.client.KeyTimeline(ctxOf(t), "g", ordered.KeyTimelineParams{})
	require.NoError(t, err)
	require.True(t, tl.Found)
	require.Equal(t, int64(9), tl.SeqMax)
	var got []string
	for _, j := range tl.Jobs {
		got = append(got, fmt.Sprintf("%d:%s", j.Seq, j.Status))
	}
	require.Equal(t, []string{"0:done", "1:done", "2:done", "5:blocked", "6:queued", "9:queued"}, got)
	require.Equal(t, []ordered.SeqGap{{From: 3, To: 4}, {From: 7, To: 8}}, tl.Gaps)

	page, err := b.client.KeyTimeline(ctxOf(t), "g", ordered.KeyTimelineParams{FromSeq: 2, Limit: 2})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 2)
	require.Equal(t, int64(6), page.NextSeq)
	require.Equal(t, []ordered.SeqGap{{From: 3, To: 4}}, page.Gaps)

	code, body := b.get(t, "/keys?key=g")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "no job with seq 3 to 4")
	require.Contains(t, body, "no job with seq 7 to 8")

	_, err = b.client.Job(ctxOf(t), 123456789)
	require.True(t, errors.Is(err, ordered.ErrJobNotFound), "%v", err)

	// A contiguous key's gap passed by hand is shown with the key's jobs.
	_, err = b.q.Pool.Exec(ctxOf(t), `SELECT * FROM ordered_enqueue('[{"key":"c","seq":3}]', p_first_seq => 1)`)
	require.NoError(t, err)
	passed, err := b.client.ReleaseGap(ctxOf(t), "c")
	require.NoError(t, err)
	require.Equal(t, ordered.SeqRange{From: 1, To: 2}, passed)
	code, body = b.get(t, "/keys?key=c")
	require.Equal(t, http.StatusOK, code)
	require.Regexp(t, `passed as a gap: seq 1 to 2, .* \(released\)`, body)

	// One that waits on a gap shows the gap before its first job, says it waits, and is
	// counted on the overview.
	_, err = b.q.Pool.Exec(ctxOf(t), `SELECT * FROM ordered_enqueue('[{"key":"w","seq":3}]', p_first_seq => 1)`)
	require.NoError(t, err)
	tl, err = b.client.KeyTimeline(ctxOf(t), "w", ordered.KeyTimelineParams{})
	require.NoError(t, err)
	require.Equal(t, []ordered.SeqGap{{From: 1, To: 2}}, tl.Gaps)
	require.NotNil(t, tl.Waiting)
	require.Equal(t, ordered.SeqRange{From: 1, To: 2}, tl.Waiting.Missing)
	require.Equal(t, "wait", tl.Waiting.GapAction)
	require.False(t, tl.Waiting.Blocked)
	require.True(t, tl.Waiting.Deadline.IsZero())
	released, err := b.client.KeyTimeline(ctxOf(t), "c", ordered.KeyTimelineParams{})
	require.NoError(t, err)
	require.Nil(t, released.Waiting, "c's gap was passed: it waits on none")
	code, body = b.get(t, "/keys?key=w")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "no job with seq 1 to 2")
	require.Regexp(t, `id="waiting"[^>]*>Waiting on a gap: seq 1 to 2 is missing, since .*the gap policy waits for ever`, body)
	require.Eventually(t, func() bool {
		code, body = b.get(t, "/")
		return code == http.StatusOK && strings.Contains(body, `id="count-gap-keys">1<`)
	}, time.Minute, 50*time.Millisecond, "the overview never counted the key waiting on a gap")
	require.Contains(t, body, "keys waiting on a gap (oldest ")
}

// Text from producers and handlers cannot pose as other text: control, format and separator
// characters (a right-to-left override, a zero-width space, an escape sequence) are shown as
// their escapes, while a form's values keep them, so that the key form finds the key again.
// An expired lease reads as how long ago it expired.
func TestPagesShowHiddenCharactersAndExpiredLeasesPlainly(t *testing.T) {
	t.Parallel()
	b := setup(t, policy.Block, nil, orderedui.Auth{})
	key := "rlo\u202egnp.exe\u200b"
	ids := enqueue(t, b.client, key, 1, 2)
	settle(t, b.client, failing(key, 1, "boom\u2028next line \x1b[31mred"))
	tags := regexp.MustCompile(`<[^>]*>`)
	for _, path := range []string{"/failed", "/blocked", "/keys?key=" + url.QueryEscape(key), fmt.Sprintf("/jobs/%d", ids[0])} {
		code, body := b.get(t, path)
		require.Equal(t, http.StatusOK, code, path)
		text := tags.ReplaceAllString(body, " ")
		require.NotContains(t, text, "\u202e", path)
		require.NotContains(t, text, "\u200b", path)
		require.NotContains(t, text, "\u2028", path)
		require.NotContains(t, text, "\x1b", path)
		require.Contains(t, text, `rlo\u202egnp.exe\u200b`, path)
	}
	_, body := b.get(t, fmt.Sprintf("/jobs/%d", ids[0]))
	require.Contains(t, body, `boom\u2028next line \u001b[31mred`)
	_, body = b.get(t, "/keys?key="+url.QueryEscape(key))
	require.Contains(t, body, `id="key-input" value="`+key+`"`, "the form sends the key itself back")
	require.Contains(t, body, `data-seq="1"`, "the key is found")

	enqueue(t, b.client, "lease", 1)
	jobs, err := b.client.Claim(ctxOf(t), 1)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	_, err = b.q.Pool.Exec(ctxOf(t), `UPDATE ordered_heads SET lease_until = now() - interval '1 minute' WHERE key = 'lease'`)
	require.NoError(t, err)
	for _, path := range []string{"/", "/keys?key=lease"} {
		_, body = b.get(t, path)
		require.Regexp(t, `expired 1m\d+s ago`, body, path)
		require.NotContains(t, body, "expired -", path)
	}
}

// The overview names the worker that holds each running job, and lists the workers holding
// jobs; the job and timeline pages name the holder too. The name is what the claiming
// session's application_name said, escaped like every other value.
func TestPagesNameTheWorkerHoldingAJob(t *testing.T) {
	t.Parallel()
	b := setup(t, policy.Block, nil, orderedui.Auth{})
	cfg, err := pgxpool.ParseConfig(b.q.URL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = "<b>billing</b> worker"
	pool, err := pgxpool.NewWithConfig(ctxOf(t), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	worker, err := ordered.NewClient(pool, &ordered.Config{Lease: 30 * time.Second})
	require.NoError(t, err)
	id := enqueue(t, b.client, "cust-9", 0)[0]
	jobs, err := worker.Claim(ctxOf(t), 1)
	require.NoError(t, err)
	require.Len(t, jobs, 1)

	const shown = "&lt;b&gt;billing&lt;/b&gt; worker"
	code, body := b.get(t, "/")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<td class="worker">`+shown+`</td><td>1</td>`, "the workers table")
	require.NotContains(t, body, "<b>billing</b>")
	code, body = b.get(t, fmt.Sprintf("/jobs/%d", id))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "held by "+shown)
	code, body = b.get(t, "/keys?key=cust-9")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "by "+shown)
}
