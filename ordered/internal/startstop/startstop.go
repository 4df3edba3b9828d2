// Package startstop owns one long-running loop of a service: Start runs it in a goroutine of
// its own, Stop cancels its context and waits for it to return, and Stopped is closed when it
// has. A panic in the loop is caught and re-raised by Stop, where the owner waits, rather than
// crash the process from a goroutine nobody watches.
package startstop

import (
	"context"
	"errors"
	"sync"

	"github.com/sourcegraph/conc"
)

// ErrStarted is what Start returns for a service started before.
var ErrStarted = errors.New("startstop: already started")

// Service runs one loop. The zero value is ready; a Service starts once.
type Service struct {
	// Run is the loop: it returns when ctx is cancelled.
	Run func(ctx context.Context)

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	wg      conc.WaitGroup
	stopped chan struct{}
}

// New returns a Service that runs run.
func New(run func(ctx context.Context)) *Service { return &Service{Run: run} }

// Start runs the loop in a goroutine of its own, with a context that Stop cancels, as does
// the end of ctx. It returns at once.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return ErrStarted
	}
	s.started = true
	runCtx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	stopped := s.stoppedLocked()
	s.wg.Go(func() {
		defer close(stopped)
		s.Run(runCtx)
	})
	return nil
}

// Stop cancels the loop's context and waits for it to return; it re-raises the loop's panic,
// if it had one. Stopping a service that never started closes Stopped and returns.
func (s *Service) Stop() {
	s.mu.Lock()
	if !s.started {
		s.started = true // it never will now
		close(s.stoppedLocked())
	}
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.wg.Wait()
}

// Stopped is closed when the loop has returned (or the service was stopped unstarted).
func (s *Service) Stopped() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stoppedLocked()
}

func (s *Service) stoppedLocked() chan struct{} {
	if s.stopped == nil {
		s.stopped = make(chan struct{})
	}
	return s.stopped
}
