package orderedui

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/orderedq/ordered/ordered"
)

// csrfCookie holds the browser's CSRF token; every action form repeats it in csrfField.
const (
	csrfCookie = "ordered_ui_csrf"
	csrfField  = "csrf"
	// actionBodyMax bounds an action request's body.
	actionBodyMax = 1 << 20
)

// ErrReadOnly is the refusal of an action by a read-only dashboard.
var ErrReadOnly = errors.New("orderedui: this dashboard is read-only: actions are refused")

// csrfToken returns the request's CSRF token, setting a new one in a cookie when it has none.
func (h *Handler) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && validToken(c.Value) {
		return c.Value
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	tok := hex.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: tok, Path: h.cfg.Prefix + "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	return tok
}

func validToken(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// checkAction refuses an action that is not from a page of this dashboard: read-only mode,
// another origin (Origin or Sec-Fetch-Site), or a CSRF field that does not match the cookie.
func (h *Handler) checkAction(r *http.Request) error {
	if h.cfg.ReadOnly {
		return ErrReadOnly
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return fmt.Errorf("orderedui: action refused: sent from another site (%s)", site)
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return fmt.Errorf("orderedui: action refused: origin %q is not this dashboard's", o)
		}
	}
	c, err := r.Cookie(csrfCookie)
	if err != nil || !validToken(c.Value) {
		return errors.New("orderedui: action refused: no CSRF cookie (load the page again)")
	}
	if subtle.ConstantTimeCompare([]byte(c.Value), []byte(r.PostFormValue(csrfField))) != 1 {
		return errors.New("orderedui: action refused: the form's CSRF token does not match (load the page again)")
	}
	return nil
}

// action wraps an action handler with its checks.
func (h *Handler) action(f func(http.ResponseWriter, *http.Request, []int64)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, actionBodyMax)
		if err := r.ParseForm(); err != nil {
			h.fail(w, r, http.StatusBadRequest, fmt.Errorf("orderedui: bad form: %w", err))
			return
		}
		if err := h.checkAction(r); err != nil {
			h.fail(w, r, http.StatusForbidden, err)
			return
		}
		ids, err := idsOf(r.PostForm["id"])
		if err != nil {
			h.fail(w, r, http.StatusBadRequest, err)
			return
		}
		f(w, r, ids)
	}
}

func idsOf(vals []string) ([]int64, error) {
	if len(vals) == 0 {
		return nil, errors.New("orderedui: no job selected")
	}
	if len(vals) > ActionIDsMax {
		return nil, fmt.Errorf("orderedui: %d jobs selected; at most %d at once", len(vals), ActionIDsMax)
	}
	ids := make([]int64, 0, len(vals))
	seen := map[int64]bool{}
	for _, s := range vals {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			return nil, fmt.Errorf("orderedui: %q is not a job ID", s)
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// actionResult is what a replay or skip of a list of jobs did, job by job.
type actionResult struct {
	Verb  string
	Force bool
	Total int
	// Done were changed, Unchanged left as they were (a skip of a job that blocks nothing),
	// Refused refused with the reason.
	Done, Unchanged, Refused []outcome
	// OutOfOrder are the refused jobs that a forced replay would take.
	OutOfOrder []int64
	// Stopped is the error that stopped the list (the database unreachable); the jobs after
	// the one it names were not tried.
	Stopped string
	Back    string
}

type outcome struct {
	ID   int64
	Text string
}

// refusal reports whether err refuses one job only (the next ones may still be done), as the
// CLI's replay and skip count them.
func refusal(err error) bool {
	return errors.Is(err, ordered.ErrNotFailed) || errors.Is(err, ordered.ErrReplayOutOfOrder) ||
		errors.Is(err, ordered.ErrLaterJobRunning)
}

func (h *Handler) replay(w http.ResponseWriter, r *http.Request, ids []int64) {
	force := r.PostFormValue("force") == "1"
	res := actionResult{Verb: "replay", Force: force, Total: len(ids), Back: h.back(r)}
	for _, id := range ids {
		err := h.client.Replay(r.Context(), id, ordered.ReplayParams{Force: force})
		h.cfg.Logger.Info("orderedui: replay", "job", id, "force", force, "remote", r.RemoteAddr, "err", err)
		switch {
		case err == nil:
			text := "queued again with fresh attempts"
			if force {
				text += " (forced: it runs after later jobs of its key)"
			}
			res.Done = append(res.Done, outcome{id, text})
		case errors.Is(err, ordered.ErrReplayOutOfOrder):
			res.OutOfOrder = append(res.OutOfOrder, id)
			res.Refused = append(res.Refused, outcome{id, message(err)})
		case refusal(err):
			res.Refused = append(res.Refused, outcome{id, message(err)})
		default:
			res.Stopped = fmt.Sprintf("stopped at job %d: %s", id, message(err))
			h.renderCode(w, r, http.StatusInternalServerError, "result", "Replay", res)
			return
		}
	}
	h.render(w, r, "result", "Replay", res)
}

func (h *Handler) skip(w http.ResponseWriter, r *http.Request, ids []int64) {
	res := actionResult{Verb: "skip", Total: len(ids), Back: h.back(r)}
	for _, id := range ids {
		released, err := h.client.Skip(r.Context(), id)
		h.cfg.Logger.Info("orderedui: skip", "job", id, "released", released, "remote", r.RemoteAddr, "err", err)
		switch {
		case err == nil && released:
			res.Done = append(res.Done, outcome{id, "skipped: its key moves on to its next job; the job stays failed, for the record"})
		case err == nil:
			res.Unchanged = append(res.Unchanged, outcome{id, "blocks nothing: its key had moved on already; left as it is"})
		case refusal(err):
			res.Refused = append(res.Refused, outcome{id, message(err)})
		default:
			res.Stopped = fmt.Sprintf("stopped at job %d: %s", id, message(err))
			h.renderCode(w, r, http.StatusInternalServerError, "result", "Skip", res)
			return
		}
	}
	h.render(w, r, "result", "Skip", res)
}

func message(err error) string { return strings.TrimPrefix(err.Error(), "ordered: ") }

// back is the form's page to go back to: a path of this dashboard, else the overview.
func (h *Handler) back(r *http.Request) string {
	b := r.PostFormValue("back")
	if strings.HasPrefix(b, h.cfg.Prefix+"/") && !strings.HasPrefix(b, "//") && !strings.Contains(b, `\`) {
		return b
	}
	return h.cfg.Prefix + "/"
}
