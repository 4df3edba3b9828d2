package cli

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// readyPingTimeout bounds the database ping behind one /readyz answer.
const readyPingTimeout = 2 * time.Second

// metricsAddrUsage is the help of work's --metrics-addr.
const metricsAddrUsage = "serve Prometheus /metrics, /healthz (liveness: 200 until stopped) and /readyz " +
	"(readiness: 503 with the reason while starting or draining, or when the database does not answer a ping within 2s) on this address " +
	"(port 0: a free port, logged)"

// serveMetrics serves the worker's metrics and its probes on addr until the returned server
// is closed; listening is the address it listens on (addr with its port, if that was 0). /healthz is liveness: it does not ask the database, so that an outage does not
// get every worker restarted. /readyz is readiness: it pings the database on every request.
func serveMetrics(addr string, reg *prometheus.Registry, r workerRun) (srv *http.Server, listening string, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) {
		select {
		case <-r.worker.Stopped():
			http.Error(rw, "stopped", http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(rw, "ok")
		}
	})
	mux.HandleFunc("/readyz", func(rw http.ResponseWriter, req *http.Request) {
		if reason := notReady(req.Context(), r); reason != "" {
			http.Error(rw, reason, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(rw, "ok")
	})
	srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	return srv, ln.Addr().String(), nil
}

// notReady says in one line why the worker should get no traffic, or returns "" when it is
// ready: started, not stopping, and the database answered a ping just now.
func notReady(ctx context.Context, r workerRun) string {
	select {
	case <-r.worker.Stopped():
		return "stopped"
	case <-r.draining:
		return "draining"
	default:
	}
	if err := r.worker.Err(); err != nil {
		return "stopping: " + oneLine(err.Error())
	}
	select {
	case <-r.running:
	default:
		return "starting"
	}
	ctx, cancel := context.WithTimeout(ctx, readyPingTimeout)
	defer cancel()
	if err := r.pool.Ping(ctx); err != nil {
		return "database unreachable: " + oneLine(err.Error())
	}
	return ""
}
