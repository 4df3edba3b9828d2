// Package faultproxy is a TCP proxy for tests that cuts traffic the way a network partition
// does: Blackhole stops forwarding in both directions while every connection stays open, so
// neither end hears anything, not even that the other has gone; Heal delivers what was held
// and forwards again. In front of PostgreSQL it also refuses sessions the way a server that
// is starting up or shutting down does (RefuseNext), or resets them as they start, the way a
// session ended while it connects can end (CutNext).
//
// It listens on a free port of 127.0.0.1 and forwards each connection it accepts to one
// target address. Connections accepted while the proxy is blackholed are held too.
package faultproxy

import (
	"net"
	"sync"

	"github.com/jackc/pgx/v5/pgproto3"
)

// Proxy forwards the connections it accepts to its target. Close it when done.
type Proxy struct {
	target   string
	listener net.Listener
	wg       sync.WaitGroup

	mu sync.Mutex
	// open is closed while traffic flows; a Blackhole replaces it with an open channel.
	open   chan struct{}
	conns  map[net.Conn]struct{}
	closed chan struct{}
	// refuse is how many of the next connections RefuseNext refuses, and with what.
	refuse        int
	refuseCode    string
	refuseMessage string
	// cut is how many of the next connections CutNext resets.
	cut int
}

// New starts a proxy to target (host:port).
func New(target string) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	open := make(chan struct{})
	close(open)
	p := &Proxy{target: target, listener: l, open: open, conns: map[net.Conn]struct{}{}, closed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.listener.Addr().String() }

// Blackhole stops forwarding in both directions and keeps every connection open: what either
// end sends is held, and nothing is closed, until Heal.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default: // already blackholed
	}
}

// Heal forwards again, what was held first.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// Close stops the proxy and closes every connection, and returns once they are gone.
func (p *Proxy) Close() error {
	p.mu.Lock()
	select {
	case <-p.closed:
		p.mu.Unlock()
		return nil
	default:
	}
	close(p.closed)
	err := p.listener.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// RefuseNext makes the proxy answer each of the next n connections itself, as a PostgreSQL
// server that refuses the session: the client's startup message gets a FATAL error with
// SQLSTATE code and message, and the connection is closed.
func (p *Proxy) RefuseNext(n int, code, message string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse, p.refuseCode, p.refuseMessage = n, code, message
}

// CutNext makes the proxy reset each of the next n connections once it has read the client's
// startup message, without an answer: the client reads "connection reset by peer", as it may
// when its session is ended while it connects (by pg_terminate_backend, a fast shutdown, or
// a network device). Refusals (RefuseNext) are taken first.
func (p *Proxy) CutNext(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = n
}

// refusal returns how the next connection is refused, if it is: with an error, or with a
// reset (a nil error).
func (p *Proxy) refusal() (*pgproto3.ErrorResponse, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.refuse > 0:
		p.refuse--
		return &pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: p.refuseCode, Message: p.refuseMessage}, true
	case p.cut > 0:
		p.cut--
		return nil, true
	}
	return nil, false
}

// refuseSession reads client's startup message (declining TLS first if it asks) and answers
// it with refusal, or resets the connection if refusal is nil.
func (p *Proxy) refuseSession(client net.Conn, refusal *pgproto3.ErrorResponse) {
	defer p.wg.Done()
	defer p.untrack(client)
	backend := pgproto3.NewBackend(client, client)
	for {
		msg, err := backend.ReceiveStartupMessage()
		if err != nil {
			return
		}
		if _, tls := msg.(*pgproto3.SSLRequest); tls {
			if _, err := client.Write([]byte{'N'}); err != nil {
				return
			}
			continue
		}
		if refusal == nil {
			// Closed with unread data or a zero linger, a TCP connection is reset.
			if tcp, ok := client.(*net.TCPConn); ok {
				_ = tcp.SetLinger(0)
			}
			return
		}
		backend.Send(refusal)
		_ = backend.Flush()
		return
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return // closed
		}
		if refusal, ok := p.refusal(); ok {
			if !p.track(client) {
				return
			}
			p.wg.Add(1)
			go p.refuseSession(client, refusal)
			continue
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		if !p.track(client, server) {
			return
		}
		p.wg.Add(2)
		go p.pump(client, server)
		go p.pump(server, client)
	}
}

// track registers a connection pair, or closes it if the proxy is closing.
func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.closed:
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	default:
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

// pump copies src to dst, holding each read while the proxy is blackholed. The end of src
// (or a failed write) closes both, once traffic flows: a partition hides a close as well.
func (p *Proxy) pump(src, dst net.Conn) {
	defer p.wg.Done()
	defer p.untrack(src, dst)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := src.Read(buf)
		if !p.wait() {
			return
		}
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if rerr != nil {
			return
		}
	}
}

// wait blocks while the proxy is blackholed; false: it is closing.
func (p *Proxy) wait() bool {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	select {
	case <-open:
		return true
	case <-p.closed:
		return false
	}
}

func (p *Proxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}
