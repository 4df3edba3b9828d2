package orderedui

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/orderedq/ordered/ordered"
)

// overviewShown bounds the blocked keys and running jobs the overview lists.
const overviewShown = 10

type overviewData struct {
	Stats     ordered.Stats
	CountedAt time.Time
	Done      chart
	Oldest    chart
	Blocked   ordered.BlockedKeysPage
	Running   []ordered.RunningJob
	Workers   []ordered.WorkerClaims
	Expired   int
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	stats, err := h.stats(ctx, 2*h.cfg.StatsMaxAge)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	done, err := h.doneByMinute(ctx, 2*h.doneMaxAge())
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	blocked, err := h.client.BlockedKeysPage(ctx, ordered.BlockedKeysPageParams{Limit: overviewShown, WaitingUpTo: 1000})
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	running, err := h.client.RunningJobs(ctx, overviewShown)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	workers, err := h.client.Workers(ctx, overviewShown)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	now := time.Now()
	d := overviewData{Stats: stats, CountedAt: stats.CountedAt, Blocked: blocked, Running: running, Workers: workers,
		Done: doneChart(done, now), Oldest: ageChart(h.samples.list(), now, h.cfg.SampleInterval)}
	for _, j := range running {
		if j.LeaseLeft <= 0 {
			d.Expired++
		}
	}
	h.render(w, r, "overview", "Overview", d)
}

type blockedData struct {
	Page  ordered.BlockedKeysPage
	First bool
	Next  string
}

func (h *Handler) blocked(w http.ResponseWriter, r *http.Request) {
	after, err := cursorOf(r.URL.Query())
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	p, err := h.client.BlockedKeysPage(r.Context(), ordered.BlockedKeysPageParams{After: after, Limit: h.cfg.PageSize})
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	d := blockedData{Page: p, First: after == nil}
	if p.Next != nil {
		d.Next = h.cfg.Prefix + "/blocked?" + cursorQuery(url.Values{}, p.Next).Encode()
	}
	h.render(w, r, "blocked", "Blocked keys", d)
}

type failedData struct {
	Prefix, Kind, Error, Blocking string
	Page                          ordered.FailedJobsPage
	First                         bool
	Next, Restart                 string
}

func (h *Handler) failed(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	after, err := cursorOf(q)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	d := failedData{Prefix: q.Get("prefix"), Kind: q.Get("kind"), Error: q.Get("error"), Blocking: q.Get("blocking"), First: after == nil}
	p := ordered.FailedJobsPageParams{KeyPrefix: d.Prefix, Kind: d.Kind, ErrorContains: d.Error, After: after, Limit: h.cfg.PageSize}
	switch d.Blocking {
	case "", "all":
		d.Blocking = "all"
	case "yes", "no":
		b := d.Blocking == "yes"
		p.Blocking = &b
	default:
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("blocking=%q: want all, yes or no", d.Blocking))
		return
	}
	if d.Page, err = h.client.FailedJobsPage(r.Context(), p); err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	filters := url.Values{}
	for k, v := range map[string]string{"prefix": d.Prefix, "kind": d.Kind, "error": d.Error, "blocking": d.Blocking} {
		if v != "" && !(k == "blocking" && v == "all") {
			filters.Set(k, v)
		}
	}
	d.Restart = h.cfg.Prefix + "/failed?" + filters.Encode()
	if d.Page.Next != nil {
		d.Next = h.cfg.Prefix + "/failed?" + cursorQuery(filters, d.Page.Next).Encode()
	}
	h.render(w, r, "failed", "Failed jobs", d)
}

// cursorOf reads the after_key and after_seq of a keyset page; nil without them.
func cursorOf(q url.Values) (*ordered.FailedJobsCursor, error) {
	if !q.Has("after_key") {
		return nil, nil
	}
	seq, err := strconv.ParseInt(q.Get("after_seq"), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("after_seq=%q is not a number", q.Get("after_seq"))
	}
	return &ordered.FailedJobsCursor{Key: q.Get("after_key"), Seq: seq}, nil
}

func cursorQuery(base url.Values, c *ordered.FailedJobsCursor) url.Values {
	q := url.Values{}
	for k, v := range base {
		q[k] = v
	}
	q.Set("after_key", c.Key)
	q.Set("after_seq", strconv.FormatInt(c.Seq, 10))
	return q
}

type keyData struct {
	Query    string
	Timeline ordered.KeyTimeline
	Rows     []timelineRow
	Similar  []string
	Next     string
	From     int64
}

// timelineRow is a job of a key's timeline, or a gap in its seqs.
type timelineRow struct {
	Job *ordered.JobRecord
	Gap *ordered.SeqGap
}

func (h *Handler) key(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := keyData{Query: q.Get("key")}
	if q.Has("from") {
		from, err := strconv.ParseInt(q.Get("from"), 10, 64)
		if err != nil || from < 0 {
			h.fail(w, r, http.StatusBadRequest, fmt.Errorf("from=%q is not a seq", q.Get("from")))
			return
		}
		d.From = from
	}
	if d.Query == "" {
		h.render(w, r, "key", "Key timeline", d)
		return
	}
	t, err := h.client.KeyTimeline(r.Context(), d.Query, ordered.KeyTimelineParams{FromSeq: d.From, Limit: h.cfg.PageSize})
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	d.Timeline = t
	if !t.Found {
		if d.Similar, err = h.client.SearchKeys(r.Context(), d.Query, 20); err != nil {
			h.fail(w, r, http.StatusInternalServerError, err)
			return
		}
	}
	gaps := t.Gaps
	for i := range t.Jobs {
		j := &t.Jobs[i]
		for len(gaps) > 0 && gaps[0].To < j.Seq {
			d.Rows = append(d.Rows, timelineRow{Gap: &gaps[0]})
			gaps = gaps[1:]
		}
		d.Rows = append(d.Rows, timelineRow{Job: j})
	}
	if t.NextSeq >= 0 {
		d.Next = h.cfg.Prefix + "/keys?" + url.Values{"key": {d.Query}, "from": {strconv.FormatInt(t.NextSeq, 10)}}.Encode()
	}
	h.render(w, r, "key", "Key "+truncate(d.Query, 60), d)
}

type jobData struct {
	Job     ordered.JobRecord
	Payload string
}

func (h *Handler) job(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("%q is not a job ID", r.PathValue("id")))
		return
	}
	j, err := h.client.Job(r.Context(), id)
	switch {
	case errors.Is(err, ordered.ErrJobNotFound):
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("no job %d (it may have been archived)", id))
		return
	case err != nil:
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, j.Payload, "", "  "); err != nil {
		pretty.Reset()
		pretty.Write(j.Payload)
	}
	h.render(w, r, "job", fmt.Sprintf("Job %d", id), jobData{Job: j, Payload: pretty.String()})
}

// truncate shortens s to n runes, marking the cut.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
