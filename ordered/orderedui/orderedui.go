package orderedui

import (
	"bytes"
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/orderedq/ordered/ordered"
)

// Defaults and limits of Config.
const (
	// RefreshIntervalDefault is how often the live parts of a page are fetched again.
	RefreshIntervalDefault = 5 * time.Second
	// SampleIntervalDefault is the spacing of the chart of the oldest ready job's age.
	SampleIntervalDefault = 15 * time.Second
	// StatsMaxAgeDefault is how old the counts a page shows may be (see Client.RecentStats).
	StatsMaxAgeDefault = 5 * time.Second
	// ChartWindow is the span of the overview's charts.
	ChartWindow = time.Hour
	// PageSizeDefault is how many rows a list page shows.
	PageSizeDefault = 50
	// ActionIDsMax bounds the jobs one action request names.
	ActionIDsMax = 1000
	// RequestTimeoutDefault bounds one request's database work.
	RequestTimeoutDefault = 15 * time.Second
)

// Config configures the dashboard; the zero value is valid.
type Config struct {
	// Prefix is the path the handler is mounted at (after http.StripPrefix), e.g.
	// "/ops/queue"; links and cookies are made under it. Empty: the root.
	Prefix string
	// ReadOnly hides every action and refuses every action request.
	ReadOnly bool
	// RefreshInterval is how often a page's live parts are fetched again; default
	// RefreshIntervalDefault.
	RefreshInterval time.Duration
	// SampleInterval is the spacing of the overview's chart of the oldest ready job's age (a
	// sample at most every half of it); default SampleIntervalDefault.
	SampleInterval time.Duration
	// StatsMaxAge is how often the counts are read in the background, and how old the
	// overview's may be (twice that, at most, before a page reads them itself); the done rate
	// is counted every six times that. Default StatsMaxAgeDefault. Counts are shared with the
	// workers (ordered_stats), so the table is counted once per StatsMaxAge however many
	// dashboards and workers read them.
	StatsMaxAge time.Duration
	// PageSize is how many rows a list page shows; default PageSizeDefault.
	PageSize int
	// RequestTimeout bounds the database work of one page, so that a page the database
	// does not answer in time fails with 503 instead of holding one of the pool's
	// connections, and four times it that of an action; default RequestTimeoutDefault.
	RequestTimeout time.Duration
	// Logger receives a line for every action and every page that failed (5xx); nil:
	// slog.Default().
	Logger *slog.Logger
}

func (c *Config) withDefaults() *Config {
	out := Config{}
	if c != nil {
		out = *c
	}
	out.Prefix = strings.TrimRight(out.Prefix, "/")
	out.RefreshInterval = cmp.Or(out.RefreshInterval, RefreshIntervalDefault)
	out.SampleInterval = cmp.Or(out.SampleInterval, SampleIntervalDefault)
	out.StatsMaxAge = cmp.Or(out.StatsMaxAge, StatsMaxAgeDefault)
	out.PageSize = cmp.Or(out.PageSize, PageSizeDefault)
	out.RequestTimeout = cmp.Or(out.RequestTimeout, RequestTimeoutDefault)
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return &out
}

func (c *Config) validate() error {
	switch {
	case c.Prefix != "" && !strings.HasPrefix(c.Prefix, "/"):
		return fmt.Errorf("orderedui: Config.Prefix %q must start with /", c.Prefix)
	case c.RefreshInterval < 0 || c.SampleInterval < 0 || c.StatsMaxAge < 0 || c.RequestTimeout < 0:
		return fmt.Errorf("orderedui: Config intervals must not be negative")
	case c.PageSize < 1 || c.PageSize > ordered.InspectLimitMax:
		return fmt.Errorf("orderedui: Config.PageSize %d must be 1 to %d", c.PageSize, ordered.InspectLimitMax)
	}
	return nil
}

//go:embed templates/*.html static/*
var assets embed.FS

// Handler is the dashboard, an http.Handler. Close it to stop its sampler.
type Handler struct {
	client *ordered.Client
	cfg    *Config
	mux    *http.ServeMux
	pages  map[string]*template.Template

	samples *sampler
	// The sampler's last counts and done rate, and when it took them.
	cacheMu     sync.Mutex
	lastStats   ordered.Stats
	lastStatsAt time.Time
	lastDone    []ordered.MinuteCount
	lastDoneAt  time.Time

	stop context.CancelFunc
	done chan struct{}
}

// New returns the dashboard on client and starts its sampler; cfg may be nil for the
// defaults.
func New(client *ordered.Client, cfg *Config) (*Handler, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	pages, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	h := &Handler{client: client, cfg: c, pages: pages, samples: newSampler(ChartWindow, c.SampleInterval),
		stop: stop, done: make(chan struct{})}
	h.routes()
	go h.sample(ctx)
	return h, nil
}

// Close stops the sampler and waits for it. The handler still serves after Close, reading
// the counts itself.
func (h *Handler) Close() {
	h.stop()
	<-h.done
}

// ServeHTTP serves the dashboard.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Security-Policy",
		"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "same-origin")
	// Keys, filters and cursors go to the database as text, which holds no NUL and is UTF-8.
	for name, values := range r.URL.Query() {
		for _, v := range values {
			if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
				h.fail(w, r, http.StatusBadRequest, fmt.Errorf("the query parameter %q is not valid text (UTF-8 without NUL)", name))
				return
			}
		}
	}
	timeout := h.cfg.RequestTimeout
	if r.Method == http.MethodPost {
		timeout *= 4 // an action replays or skips up to ActionIDsMax jobs, one at a time
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	h.mux.ServeHTTP(w, r.WithContext(ctx))
}

func (h *Handler) routes() {
	h.mux = http.NewServeMux()
	static, _ := fs.Sub(assets, "static")
	files := http.StripPrefix("/static/", http.FileServerFS(static))
	h.mux.Handle("GET /static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") { // a directory: no listing
			http.NotFound(w, r)
			return
		}
		files.ServeHTTP(w, r)
	}))
	h.mux.HandleFunc("GET /{$}", h.overview)
	h.mux.HandleFunc("GET /blocked", h.blocked)
	h.mux.HandleFunc("GET /failed", h.failed)
	h.mux.HandleFunc("GET /keys", h.key)
	h.mux.HandleFunc("GET /jobs/{id}", h.job)
	h.mux.HandleFunc("POST /replay", h.action(h.replay))
	h.mux.HandleFunc("POST /skip", h.action(h.skip))
}

// sample keeps the overview's counts and done rate fresh in the background, so that no page
// waits for a count of the whole table: every StatsMaxAge it reads the counts (shared with
// the workers, taken anew only when none are that young) and records the oldest ready job's
// age; every doneMaxAge it counts the last hour's done jobs by minute.
func (h *Handler) sample(ctx context.Context) {
	defer close(h.done)
	t := time.NewTicker(h.cfg.StatsMaxAge)
	defer t.Stop()
	for {
		qctx, cancel := context.WithTimeout(ctx, time.Minute)
		_, _ = h.stats(qctx, 0)
		_, _ = h.doneByMinute(qctx, h.doneMaxAge())
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// doneMaxAge is how old the done rate may be: it counts an hour of done jobs, so it is
// counted less often than the counts are read.
func (h *Handler) doneMaxAge() time.Duration { return 6 * h.cfg.StatsMaxAge }

// stats returns the counts, from the sampler's cache when it is younger than maxAge, else
// read now (and recorded as a sample).
func (h *Handler) stats(ctx context.Context, maxAge time.Duration) (ordered.Stats, error) {
	h.cacheMu.Lock()
	s, at := h.lastStats, h.lastStatsAt
	h.cacheMu.Unlock()
	if !at.IsZero() && time.Since(at) < maxAge {
		return s, nil
	}
	s, err := h.client.RecentStats(ctx, h.cfg.StatsMaxAge)
	if err != nil {
		return s, err
	}
	now := time.Now()
	h.samples.add(now, s.OldestReady)
	h.cacheMu.Lock()
	h.lastStats, h.lastStatsAt = s, now
	h.cacheMu.Unlock()
	return s, nil
}

// doneByMinute returns the last hour's done jobs by minute, cached like stats.
func (h *Handler) doneByMinute(ctx context.Context, maxAge time.Duration) ([]ordered.MinuteCount, error) {
	h.cacheMu.Lock()
	d, at := h.lastDone, h.lastDoneAt
	h.cacheMu.Unlock()
	if !at.IsZero() && time.Since(at) < maxAge {
		return d, nil
	}
	d, err := h.client.DoneByMinute(ctx, ChartWindow)
	if err != nil {
		return nil, err
	}
	h.cacheMu.Lock()
	h.lastDone, h.lastDoneAt = d, time.Now()
	h.cacheMu.Unlock()
	return d, nil
}

// page is what every page's template gets.
type page struct {
	Title    string
	Nav      string
	Prefix   string
	ReadOnly bool
	CSRF     string
	// Live is the URL of the page's live part (fetched again every Refresh ms); empty: none.
	Live    string
	Refresh int64
	// Timeout is the request timeout, in ms: the live part's fetch waits a little longer.
	Timeout int64
	// Here is the page's own URL, where an action's result page links back to.
	Here string
	Data any
}

// render writes the page name; a fragment request (?fragment=1) gets only its live part.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, name, title string, data any) {
	h.renderCode(w, r, http.StatusOK, name, title, data)
}

func (h *Handler) renderCode(w http.ResponseWriter, r *http.Request, code int, name, title string, data any) {
	p := page{Title: title, Nav: name, Prefix: h.cfg.Prefix, ReadOnly: h.cfg.ReadOnly,
		CSRF: h.csrfToken(w, r), Refresh: h.cfg.RefreshInterval.Milliseconds(),
		Timeout: h.cfg.RequestTimeout.Milliseconds(), Data: data}
	tmpl := "layout"
	here := r.URL.Query()
	here.Del("fragment")
	p.Here = h.cfg.Prefix + r.URL.Path
	if len(here) > 0 {
		p.Here += "?" + here.Encode()
	}
	if r.URL.Query().Get("fragment") == "1" {
		tmpl = "content"
		if livePages[name] {
			tmpl = "live"
		}
	} else if livePages[name] {
		q := r.URL.Query()
		q.Set("fragment", "1")
		p.Live = h.cfg.Prefix + r.URL.Path + "?" + q.Encode()
	}
	var buf bytes.Buffer
	if err := h.pages[name].ExecuteTemplate(&buf, tmpl, p); err != nil {
		h.cfg.Logger.Error("orderedui: render", "page", name, "err", err)
		http.Error(w, "render failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(showHidden(buf.Bytes()))
}

// showHidden writes each control, format or line-separator character in the text of a
// rendered page (but tab and newline) as its escape, \u202e (\U000e0067 beyond 16 bits):
// keys, kinds and errors come from producers and handlers, and a right-to-left override or a
// zero-width space in one would make it read as something else. Inside tags, attribute values
// keep their characters, so that a form sends back the key it was given (html/template
// escapes < and > in values, so a < always opens a tag). The templates themselves hold none.
func showHidden(page []byte) []byte {
	if bytes.IndexFunc(page, hidden) < 0 {
		return page
	}
	var b bytes.Buffer
	inTag := false
	for len(page) > 0 {
		r, n := utf8.DecodeRune(page)
		switch {
		case r == '<':
			inTag = true
		case r == '>':
			inTag = false
		}
		switch {
		case inTag || !hidden(r):
			b.Write(page[:n])
		case r > 0xffff:
			fmt.Fprintf(&b, `\U%08x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		page = page[n:]
	}
	return b.Bytes()
}

func hidden(r rune) bool {
	return r != '\n' && r != '\t' && unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp)
}

// livePages are the pages whose "live" part is fetched again every RefreshInterval.
var livePages = map[string]bool{"overview": true, "blocked": true, "key": true}

// fail shows an error page with status code, and logs a failure of the dashboard's own (5xx).
// A page that the database did not answer within Config.RequestTimeout is 503.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, code int, err error) {
	if errors.Is(err, context.DeadlineExceeded) && r.Context().Err() != nil {
		code = http.StatusServiceUnavailable
		err = fmt.Errorf("the database did not answer in time: %w", err)
	}
	if code >= 500 {
		h.cfg.Logger.Error("orderedui: page failed", "method", r.Method, "path", r.URL.Path, "status", code, "err", err)
	}
	h.renderCode(w, r, code, "error", http.StatusText(code), err.Error())
}

// sampler keeps the (time, oldest ready age) samples of the last window, at most one per half
// interval.
type sampler struct {
	mu     sync.Mutex
	window time.Duration
	every  time.Duration
	points []samplePoint
}

type samplePoint struct {
	at  time.Time
	age time.Duration
}

func newSampler(window, every time.Duration) *sampler {
	return &sampler{window: window, every: every}
}

func (s *sampler) add(at time.Time, age time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.points); n > 0 && at.Sub(s.points[n-1].at) < s.every/2 {
		return
	}
	s.points = append(s.points, samplePoint{at, age})
	cut := 0
	for cut < len(s.points) && at.Sub(s.points[cut].at) > s.window {
		cut++
	}
	s.points = s.points[cut:]
}

func (s *sampler) list() []samplePoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]samplePoint(nil), s.points...)
}
