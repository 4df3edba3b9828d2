package orderedui

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/orderedq/ordered/ordered"
)

// AddrDefault is where Serve listens by default: the loopback interface only.
const AddrDefault = "127.0.0.1:8080"

// tokenCookie keeps a token given once in the URL (?token=), so that a browser can use it.
const tokenCookie = "ordered_ui_token"

// Auth is the credentials a dashboard requires: a token, or a user and password (HTTP basic
// auth). The zero value requires none.
type Auth struct {
	Token          string
	User, Password string
}

// Enabled reports whether a requires credentials.
func (a Auth) Enabled() bool { return a.Token != "" || a.User != "" }

// AuthFromEnv reads ORDERED_UI_TOKEN, or ORDERED_UI_USER and ORDERED_UI_PASSWORD.
func AuthFromEnv() (Auth, error) {
	a := Auth{Token: os.Getenv("ORDERED_UI_TOKEN"), User: os.Getenv("ORDERED_UI_USER"),
		Password: os.Getenv("ORDERED_UI_PASSWORD")}
	switch {
	case a.Token != "" && (a.User != "" || a.Password != ""):
		return Auth{}, errors.New("orderedui: set ORDERED_UI_TOKEN or ORDERED_UI_USER and ORDERED_UI_PASSWORD, not both")
	case (a.User == "") != (a.Password == ""):
		return Auth{}, errors.New("orderedui: ORDERED_UI_USER and ORDERED_UI_PASSWORD go together: set both or neither")
	}
	return a, nil
}

// RequireAuth serves h only to requests that carry a's credentials, and 401 to the others.
// A token is accepted as "Authorization: Bearer TOKEN", or once as ?token=TOKEN in a URL,
// which sets a cookie and redirects to the URL without it. With a zero a, h is returned.
func RequireAuth(h http.Handler, a Auth) http.Handler {
	if !a.Enabled() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.User != "" {
			u, p, ok := r.BasicAuth()
			if ok && equal(u, a.User) && equal(p, a.Password) {
				h.ServeHTTP(w, r)
				return
			}
			w.Header().Set("WWW-Authenticate", `Basic realm="ordered", charset="UTF-8"`)
			http.Error(w, "ordered ui: authentication required", http.StatusUnauthorized)
			return
		}
		if t := r.URL.Query().Get("token"); t != "" && r.Method == http.MethodGet && equal(t, a.Token) {
			http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: t, Path: "/", HttpOnly: true,
				SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
			q := r.URL.Query()
			q.Del("token")
			// One leading slash: "//host/x" would send the browser to another site.
			u := url.URL{Path: "/" + strings.TrimLeft(r.URL.Path, "/\\"), RawQuery: q.Encode()}
			http.Redirect(w, r, u.String(), http.StatusSeeOther)
			return
		}
		given := ""
		if scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
			given = strings.TrimLeft(token, " ")
		}
		if c, err := r.Cookie(tokenCookie); given == "" && err == nil {
			given = c.Value
		}
		if given != "" && equal(given, a.Token) {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="ordered"`)
		http.Error(w, "ordered ui: authentication required (open the URL with ?token=... once)", http.StatusUnauthorized)
	})
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// ServeConfig configures Serve.
type ServeConfig struct {
	// Addr is the address to listen on; default AddrDefault. An address that is not a
	// loopback one (another IP, a host name, or none: every interface) needs Auth.
	Addr string
	// Auth is the credentials required; see AuthFromEnv.
	Auth Auth
	// UI configures the dashboard.
	UI Config
	// Out receives the line that says where the dashboard is; nil: nowhere.
	Out io.Writer
}

// ErrAuthRequired is Serve's refusal to listen beyond the loopback interface without
// credentials.
var ErrAuthRequired = errors.New("orderedui: listening beyond the loopback interface needs credentials: " +
	"set ORDERED_UI_TOKEN, or ORDERED_UI_USER and ORDERED_UI_PASSWORD")

// Serve serves the dashboard on client until ctx ends, then shuts the server down. It
// refuses an address beyond the loopback interface without credentials (ErrAuthRequired).
func Serve(ctx context.Context, client *ordered.Client, cfg *ServeConfig) error {
	c := ServeConfig{}
	if cfg != nil {
		c = *cfg
	}
	if c.Addr == "" {
		c.Addr = AddrDefault
	}
	if err := CheckAddr(c.Addr, c.Auth); err != nil {
		return err
	}
	ui, err := New(client, &c.UI)
	if err != nil {
		return err
	}
	defer ui.Close()
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("orderedui: %w", err)
	}
	root := http.NewServeMux()
	prefix := ui.cfg.Prefix
	if prefix == "" {
		root.Handle("/", ui)
	} else {
		root.Handle(prefix+"/", http.StripPrefix(prefix, ui))
	}
	srv := &http.Server{Handler: RequireAuth(root, c.Auth), ReadHeaderTimeout: 10 * time.Second}
	if c.Out != nil {
		u := "http://" + ln.Addr().String() + prefix + "/"
		if c.Auth.Token != "" {
			u += " (open it once with ?token= and the token of ORDERED_UI_TOKEN)"
		}
		mode := ""
		if c.UI.ReadOnly {
			mode = " (read-only)"
		}
		fmt.Fprintf(c.Out, "ordered ui%s: serving on %s\n", mode, u)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("orderedui: %w", err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(shut)
	<-errc
	return err
}

// CheckAddr refuses an address Serve would refuse: one that does not parse, or one beyond
// the loopback interface without credentials (ErrAuthRequired). Empty is AddrDefault.
func CheckAddr(addr string, a Auth) error {
	if addr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			err = errors.New(ae.Err)
		}
		return fmt.Errorf("orderedui: address %q is not HOST:PORT: %w", addr, err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil || port == "" {
		return fmt.Errorf("orderedui: address %q: port %q is not a port number", addr, port)
	}
	if !isLoopback(host) && !a.Enabled() {
		return fmt.Errorf("%w (address %s)", ErrAuthRequired, addr)
	}
	return nil
}

// isLoopback reports whether host names the loopback interface only.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
