package cli

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderedq/ordered/ordered"
)

// workerSetup describes a worker process: its client, its worker and its handler.
type workerSetup struct {
	client ordered.Config
	worker ordered.WorkerConfig
	// handler builds the handler; it may use the worker's pool.
	handler func(pool *pgxpool.Pool) ordered.Handler
	// batchFor, if set, makes the worker a batch worker (worker.BatchSize) running the handler
	// it builds instead.
	batchFor func(pool *pgxpool.Pool) ordered.BatchHandlerFunc
	// started, if set, runs once the worker is built, before it starts (to serve metrics and
	// health, say); the function it returns runs when the process stops.
	started func(r workerRun) (func(), error)
}

// workerRun is a worker process as its started hook sees it.
type workerRun struct {
	worker *ordered.Worker
	pool   *pgxpool.Pool
	// running is closed once the worker has started; draining at the first stop signal.
	running, draining <-chan struct{}
}

// runWorker runs a worker until SIGINT or SIGTERM, then drains it: no new jobs, running ones
// finish. A worker that stopped itself (the queue's schema changed under it) ends the run
// with its error. A second signal stops it at once, releasing the running jobs for a retry. A
// signal while it connects or starts is a clean stop too: nothing ran, and it returns nil.
func (a *app) runWorker(ctx context.Context, s workerSetup) error {
	// Catch signals before anything starts, so none is lost. ctx is cancelled by the first
	// one too (see Main): connecting and starting give up at once.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	cfg := s.client
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(a.stderr, nil))
	}
	stoppedEarly := func() error {
		cfg.Logger.Info("ordered: stopped by a signal before the worker started")
		return nil
	}
	client, pool, err := a.client(ctx, &cfg, int32(max(s.worker.Workers, 1))+4)
	if err != nil {
		if ctx.Err() != nil {
			return stoppedEarly()
		}
		return err
	}
	defer pool.Close()
	var w *ordered.Worker
	if s.batchFor != nil {
		w, err = client.NewBatchWorker(s.batchFor(pool), &s.worker)
	} else {
		w, err = client.NewWorker(s.handler(pool), &s.worker)
	}
	if err != nil {
		return err
	}
	running, draining := make(chan struct{}), make(chan struct{})
	if s.started != nil {
		cleanup, err := s.started(workerRun{worker: w, pool: pool, running: running, draining: draining})
		if err != nil {
			return err
		}
		defer cleanup()
	}
	if err := w.Start(ctx); err != nil {
		if ctx.Err() != nil {
			return stoppedEarly()
		}
		return err
	}
	close(running)
	cfg.Logger.Info("ordered: worker started", "workers", s.worker.Workers, "lease", client.Config().Lease)

	select {
	case <-sigs:
	case <-w.Stopped(): // it stopped itself: the schema changed under it
		return w.Err()
	}
	close(draining)
	cfg.Logger.Info("ordered: draining; signal again to stop at once")
	// ctx ends with the first signal; stopping needs a context of its own.
	stopCtx := context.WithoutCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop(stopCtx) }()
	select {
	case err := <-stopped:
		return cmp.Or(err, w.Err())
	case <-sigs:
		cfg.Logger.Info("ordered: stopping at once; running jobs go back to the queue, their attempts not counted")
		return cmp.Or(w.StopAndCancel(stopCtx), w.Err())
	}
}

// quietLogger logs errors only: the demo's and verify's workers would drown their reports.
func quietLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelError}))
}
