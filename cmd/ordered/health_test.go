package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered/orderedtest"
)

// tcpProxy forwards connections to a server until it is cut: then it drops the connections it
// carries and closes every new one at once, as an unreachable database does.
type tcpProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.setCut(true)
		p.wg.Wait()
	})
	return p
}

func (p *tcpProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := p.cut
		p.mu.Unlock()
		if cut {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.cut { // cut while dialling
			p.mu.Unlock()
			c.Close()
			s.Close()
			continue
		}
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		go pipe(c, s)
		go pipe(s, c)
	}
}

// setCut cuts the proxy (dropping its connections) or restores it.
func (p *tcpProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
	}
}

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
// readiness: 503 with the reason while the database is unreachable and while the worker
// drains, 200 otherwise.
func TestWorkHealthAndReadiness(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	u, err := url.Parse(q.URL)
	require.NoError(t, err)
	proxy := newTCPProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	w := startCLI(t, "work", "--database-url", u.String(), "--poll", "50ms", "--metrics-addr", addr,
		"--exec", `echo $$ > "$ORDERED_TEST_DIR/pid"; while [ ! -e "$ORDERED_TEST_DIR/release" ]; do sleep 0.05; done`)
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

	proxy.setCut(true)
	requireProbe("/readyz", http.StatusServiceUnavailable, "database unreachable: ")
	requireProbe("/healthz", http.StatusOK, "ok")
	proxy.setCut(false)
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
