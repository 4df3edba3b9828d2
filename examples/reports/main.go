// Command reports is a report-generation service on ordered: an HTTP request saves a report
// request and enqueues its job in one transaction, and workers generate the reports in the
// background, each customer's in the order they were requested.
//
//	POST /reports       {"customer": "acme", "kind": "monthly"}  → 202 and the request
//	GET  /reports/{id}  → the request: queued or done, and the report once done
//
// What it shows:
//   - transactional enqueue (Client.EnqueueTx): the request row and its job commit together,
//     or neither does; a POST retried with the same Idempotency-Key fails its insert, rolls
//     back its job with it and answers with the first request;
//   - order at ingestion: the job's key is the customer and its seq is the customer's request
//     number, taken under a row lock so that seqs follow commit order;
//   - an exactly-once effect (TxHandlerFunc): the report is stored and the request marked done
//     in the same transaction as the job's completion;
//   - graceful shutdown on SIGINT or SIGTERM: the HTTP server stops, then the worker drains
//     (Stop with a deadline, then StopAndCancel).
//
// Run it with `go run ./examples/reports --database-url postgres://…` (else DATABASE_URL).
package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/schema"
)

var (
	//go:embed sql/tables.sql
	tablesSQL string
	//go:embed sql/next_seq.sql
	nextSeqSQL string
	//go:embed sql/insert_request.sql
	insertRequestSQL string
	//go:embed sql/request_by_key.sql
	requestByKeySQL string
	//go:embed sql/get_request.sql
	getRequestSQL string
	//go:embed sql/finish_request.sql
	finishRequestSQL string
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "reports:", err)
		os.Exit(1)
	}
}

type options struct {
	databaseURL, addr string
	workers           int
	generateTime      time.Duration
	drain             time.Duration
}

// run serves until ctx ends, then shuts down gracefully.
func run(ctx context.Context, args []string, out io.Writer) error {
	var o options
	fs := flag.NewFlagSet("reports", flag.ContinueOnError)
	fs.StringVar(&o.databaseURL, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default DATABASE_URL)")
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "address to listen on")
	fs.IntVar(&o.workers, "workers", 4, "reports generated at once")
	fs.DurationVar(&o.generateTime, "generate-time", 100*time.Millisecond, "how long generating a report takes")
	fs.DurationVar(&o.drain, "drain", 30*time.Second, "how long shutdown waits for running reports")
	if err := fs.Parse(args); err != nil {
		return err
	}

	pool, err := openPool(ctx, o.databaseURL, o.workers+4) // a TxHandlerFunc holds a connection
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := ordered.NewClient(pool, nil)
	if err != nil {
		return err
	}
	w, err := client.NewWorker(ordered.TxHandlerFunc(generator(o.generateTime)), &ordered.WorkerConfig{Workers: o.workers})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer stopWorker(w, o.drain, out)

	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: routes(pool, client), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(out, "reports: listening on http://%s\n", ln.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	fmt.Fprintln(out, "reports: shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil { // no new requests, so no new jobs
		return err
	}
	<-served
	return nil
}

// openPool connects and migrates the queue and the service's tables.
func openPool(ctx context.Context, url string, maxConns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(maxConns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := schema.Migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	if _, err := pool.Exec(ctx, tablesSQL); err != nil {
		pool.Close()
		return nil, fmt.Errorf("create tables: %w", err)
	}
	return pool, nil
}

// stopWorker drains the worker for up to drain, then cancels what still runs.
func stopWorker(w *ordered.Worker, drain time.Duration, out io.Writer) {
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), drain)
	defer cancelDrain()
	if err := w.Stop(drainCtx); err != nil {
		cancelCtx, cancelStop := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancelStop()
		if err := w.StopAndCancel(cancelCtx); err != nil {
			fmt.Fprintln(out, "reports: reports still running:", err)
			return
		}
	}
	fmt.Fprintln(out, "reports: worker stopped")
}

// reportJob is a job's payload: the request, by its natural key.
type reportJob struct {
	Customer string `json:"customer"`
	Seq      int64  `json:"seq"`
	Kind     string `json:"kind"`
}

// generator returns the handler that generates a report and stores it with the request.
func generator(took time.Duration) ordered.TxHandlerFunc {
	return func(ctx context.Context, tx pgx.Tx, job *ordered.Job) error {
		var r reportJob
		if err := json.Unmarshal(job.Payload, &r); err != nil {
			return ordered.Permanent(err) // retrying cannot fix the payload
		}
		select { // stands in for the slow part: queries, rendering, upload
		case <-time.After(took):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		result := fmt.Sprintf("%s report #%d for %s", r.Kind, r.Seq, r.Customer)
		tag, err := tx.Exec(ctx, finishRequestSQL, r.Customer, r.Seq, result)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return ordered.Permanent(fmt.Errorf("no queued request %s", job.IdempotencyKey()))
		}
		return nil // the worker completes the job in tx and commits
	}
}

func routes(pool *pgxpool.Pool, client *ordered.Client) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /reports", func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Customer, Kind string }
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Customer == "" || in.Kind == "" {
			http.Error(w, `want {"customer": "…", "kind": "…"}`, http.StatusBadRequest)
			return
		}
		// The event's rules (key and kind: length, control characters, NUL) before anything
		// is written: the request's own row would otherwise meet a NUL first, as a 500.
		if err := client.Validate([]ordered.Event{{Key: in.Customer, Seq: 1, Kind: "report." + in.Kind}}); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		id, created, err := createRequest(r.Context(), pool, client, in.Customer, in.Kind, r.Header.Get("Idempotency-Key"))
		switch {
		case errors.Is(err, ordered.ErrInvalidEvent):
			http.Error(w, err.Error(), http.StatusBadRequest)
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		case created:
			writeRequest(w, r, pool, id, http.StatusAccepted)
		default:
			writeRequest(w, r, pool, id, http.StatusOK) // a retry: the first request
		}
	})
	mux.HandleFunc("GET /reports/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
		if err != nil {
			http.Error(w, "bad report id", http.StatusBadRequest)
			return
		}
		writeRequest(w, r, pool, id, http.StatusOK)
	})
	return mux
}

// createRequest saves a report request and enqueues its job in one transaction. A request
// whose Idempotency-Key was seen before rolls back, job included, and returns the first
// request's id with created false.
func createRequest(ctx context.Context, pool *pgxpool.Pool, client *ordered.Client, customer, kind, key string) (id int64, created bool, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var seq int64
		if err := tx.QueryRow(ctx, nextSeqSQL, customer).Scan(&seq); err != nil {
			return err
		}
		payload, err := json.Marshal(reportJob{Customer: customer, Seq: seq, Kind: kind})
		if err != nil {
			return err
		}
		// The request row first, then its job; tx commits both or neither. In this order a
		// retried POST's insert, which waits for a worker finishing the first request, holds
		// no key row that worker's completion waits for: the two cannot deadlock.
		if err := tx.QueryRow(ctx, insertRequestSQL, customer, seq, kind, nullIfEmpty(key)).Scan(&id); err != nil {
			return err
		}
		_, err = client.EnqueueTx(ctx, tx, ordered.Event{Key: customer, Seq: seq, Kind: "report." + kind, Payload: payload})
		return err
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "report_requests_request_key_key" {
		err = pool.QueryRow(ctx, requestByKeySQL, key).Scan(&id)
		return id, false, err
	}
	return id, err == nil, err
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// request is a report request as the API shows it.
type request struct {
	ID        int64      `json:"id"`
	Customer  string     `json:"customer"`
	Seq       int64      `json:"seq"`
	Kind      string     `json:"kind"`
	Status    string     `json:"status"`
	Result    string     `json:"result,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	DoneAt    *time.Time `json:"done_at,omitempty"`
}

func writeRequest(w http.ResponseWriter, r *http.Request, pool *pgxpool.Pool, id int64, status int) {
	var q request
	err := pool.QueryRow(r.Context(), getRequestSQL, id).
		Scan(&q.ID, &q.Customer, &q.Seq, &q.Kind, &q.Status, &q.Result, &q.CreatedAt, &q.DoneAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		http.Error(w, "no such report", http.StatusNotFound)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(q)
}
