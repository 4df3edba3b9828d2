package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/policy"
)

func (a *app) workCmd() *cobra.Command {
	var (
		command     string
		workers     int
		lease       time.Duration
		maxAttempts int
		policyName  string
		poll        time.Duration
		pollOnly    bool
		metricsAddr string
	)
	cmd := &cobra.Command{
		Use:   "work --exec COMMAND",
		Short: "Run workers that execute COMMAND once per job",
		Long: `Work runs workers that execute COMMAND through /bin/sh once per job, with the job's JSON
payload on standard input and ORDERED_JOB_ID, ORDERED_KEY, ORDERED_SEQ, ORDERED_ATTEMPT and
ORDERED_KIND in its environment.

Exit 0 completes the job; exit 65 (EX_DATAERR) fails it for good and the --policy decides for
its key; any other exit retries it with backoff. The lease is renewed while COMMAND runs; if
the claim is lost, COMMAND's process group is terminated. COMMAND dies with the worker.

SIGINT or SIGTERM drains: no new jobs, running ones finish. A second signal stops at once
(running jobs go back to the queue, their attempts not counted).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if command == "" {
				return errors.New("--exec is required")
			}
			decision, err := policy.ParseDecision(policyName)
			if err != nil {
				return err
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			logger := slog.New(slog.NewTextHandler(a.stderr, nil))
			return a.runWorker(cmd.Context(), workerSetup{
				client: ordered.Config{Lease: lease, Policy: policy.Always(decision), Logger: logger},
				worker: ordered.WorkerConfig{
					Workers: workers, PollInterval: poll, PollOnly: pollOnly, Registerer: reg, MaxAttempts: maxAttempts,
				},
				handler: func(*pgxpool.Pool) ordered.Handler { return execHandler(command, a) },
				started: func(w *ordered.Worker) (func(), error) {
					if metricsAddr == "" {
						return func() {}, nil
					}
					srv, err := serveMetrics(metricsAddr, reg, w)
					if err != nil {
						return nil, err
					}
					logger.Info("ordered: serving /metrics and /healthz", "addr", metricsAddr)
					return func() { srv.Close() }, nil
				},
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&command, "exec", "", "shell command to run once per job (required)")
	f.IntVar(&workers, "workers", ordered.WorkersDefault, "jobs run at once")
	f.DurationVar(&lease, "lease", ordered.LeaseDefault, "how long a claim owns its job; renewed while the command runs")
	f.IntVar(&maxAttempts, "max-attempts", ordered.MaxAttemptsDefault, "a job fails for good after this many attempts (or fewer, if it was enqueued with fewer)")
	f.StringVar(&policyName, "policy", "block", "when a key's job fails for good: block the key, or skip to its next job")
	f.DurationVar(&poll, "poll", ordered.PollIntervalDefault, "poll interval when no notification arrives")
	f.BoolVar(&pollOnly, "poll-only", false, "do not LISTEN; poll every --poll (implied by --pooler transaction)")
	f.StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus /metrics and /healthz on this address")
	return cmd
}

func serveMetrics(addr string, reg *prometheus.Registry, w *ordered.Worker) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) {
		select {
		case <-w.Stopped():
			http.Error(rw, "stopped", http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(rw, "ok")
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	return srv, nil
}
