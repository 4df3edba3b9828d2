package orderedui

import (
	"bytes"
	"cmp"
	"context"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/orderedq/ordered/ordered"
)

// Defaults and limits of Config.
const (
	// RefreshIntervalDefault is how often the live parts of a page are fetched again.
	RefreshIntervalDefault = 5 * time.Second
	// SampleIntervalDefault is how often the sampler records the oldest ready job's age.
	SampleIntervalDefault = 15 * time.Second
	// StatsMaxAgeDefault is how old the counts a page shows may be (see Client.RecentStats).
	StatsMaxAgeDefault = 5 * time.Second
	// ChartWindow is the span of the overview's charts.
	ChartWindow = time.Hour
	// PageSizeDefault is how many rows a list page shows.
	PageSizeDefault = 50
	// ActionIDsMax bounds the jobs one action request names.
	ActionIDsMax = 1000
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
	// SampleInterval is how often the oldest ready job's age is sampled for the overview's
	// chart; default SampleIntervalDefault.
	SampleInterval time.Duration
	// StatsMaxAge is how old the counts may be; default StatsMaxAgeDefault. Counts are shared
	// with the workers (ordered_stats), so the table is counted once per StatsMaxAge however
	// many dashboards and workers read them.
	StatsMaxAge time.Duration
	// PageSize is how many rows a list page shows; default PageSizeDefault.
	PageSize int
	// Logger receives a line for every action; nil: slog.Default().
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
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return &out
}

func (c *Config) validate() error {
	switch {
	case c.Prefix != "" && !strings.HasPrefix(c.Prefix, "/"):
		return fmt.Errorf("orderedui: Config.Prefix %q must start with /", c.Prefix)
	case c.RefreshInterval < 0 || c.SampleInterval < 0 || c.StatsMaxAge < 0:
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
	stop    context.CancelFunc
	done    chan struct{}
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

// Close stops the sampler and waits for it. The handler still serves after Close, with no
// new samples.
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
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) routes() {
	h.mux = http.NewServeMux()
	static, _ := fs.Sub(assets, "static")
	h.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	h.mux.HandleFunc("GET /{$}", h.overview)
	h.mux.HandleFunc("GET /blocked", h.blocked)
	h.mux.HandleFunc("GET /failed", h.failed)
	h.mux.HandleFunc("GET /keys", h.key)
	h.mux.HandleFunc("GET /jobs/{id}", h.job)
	h.mux.HandleFunc("POST /replay", h.action(h.replay))
	h.mux.HandleFunc("POST /skip", h.action(h.skip))
}

// sample records the oldest ready job's age every SampleInterval until ctx ends.
func (h *Handler) sample(ctx context.Context) {
	defer close(h.done)
	t := time.NewTicker(h.cfg.SampleInterval)
	defer t.Stop()
	for {
		qctx, cancel := context.WithTimeout(ctx, h.cfg.SampleInterval)
		_, _ = h.stats(qctx)
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// stats returns recent counts and records them as a sample.
func (h *Handler) stats(ctx context.Context) (ordered.Stats, error) {
	s, err := h.client.RecentStats(ctx, h.cfg.StatsMaxAge)
	if err == nil {
		h.samples.add(time.Now(), s.OldestReady)
	}
	return s, err
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
		CSRF: h.csrfToken(w, r), Refresh: h.cfg.RefreshInterval.Milliseconds(), Data: data}
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
	_, _ = w.Write(buf.Bytes())
}

// livePages are the pages whose "live" part is fetched again every RefreshInterval.
var livePages = map[string]bool{"overview": true, "blocked": true, "key": true}

// fail shows an error page with status code.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, code int, err error) {
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
