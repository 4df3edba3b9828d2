package orderedui_test

import (
	"context"
	_ "embed"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/orderedtest"
	"github.com/orderedq/ordered/ordered/orderedui"
	"github.com/orderedq/ordered/schema"
)

var (
	//go:embed testdata/bench_keys.sql
	benchKeysSQL string
	//go:embed testdata/bench_jobs.sql
	benchJobsSQL string
)

// benchSchema holds the benchmark's queue; ORDERED_UI_BENCH_KEEP=1 keeps it for EXPLAIN and
// for the next run, which reuses it when it has the same size.
const benchSchema = "ordered_uibench"

// benchQueue returns a pool on a queue of ORDERED_UI_BENCH_KEYS keys (default 100,000) with
// 10 jobs each: 1,000,000 jobs by default.
func benchQueue(b *testing.B) *pgxpool.Pool {
	keys := 100_000
	if s := os.Getenv("ORDERED_UI_BENCH_KEYS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 100 {
			b.Fatalf("ORDERED_UI_BENCH_KEYS=%q: want a number of keys, at least 100", s)
		}
		keys = n
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, orderedtest.DatabaseURL())
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close(ctx)
	id := pgx.Identifier{benchSchema}.Sanitize()
	var have int64
	err = admin.QueryRow(ctx, "SELECT count(*) FROM "+id+".ordered_keys").Scan(&have)
	if err != nil || have != int64(keys) {
		b.Logf("building a queue of %d jobs in schema %s", keys*10, benchSchema)
		if _, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+id+" CASCADE"); err != nil {
			b.Fatal(err)
		}
		if _, err := admin.Exec(ctx, "CREATE SCHEMA "+id); err != nil {
			b.Fatal(err)
		}
	}
	cfg, err := pgxpool.ParseConfig(orderedtest.DatabaseURL())
	if err != nil {
		b.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = benchSchema
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if have != int64(keys) {
		if _, err := schema.Migrate(ctx, pool); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for _, q := range []string{benchKeysSQL, benchJobsSQL} {
			if _, err := pool.Exec(ctx, q, keys); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) ordered_jobs, ordered_keys"); err != nil {
			b.Fatal(err)
		}
		b.Logf("built in %v", time.Since(start).Round(time.Second))
	}
	if os.Getenv("ORDERED_UI_BENCH_KEEP") != "1" {
		// A connection of its own: admin is closed when this function returns.
		b.Cleanup(func() {
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, orderedtest.DatabaseURL())
			if err != nil {
				b.Errorf("drop the bench queue: %v", err)
				return
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, "DROP SCHEMA "+id+" CASCADE"); err != nil {
				b.Errorf("drop the bench queue: %v", err)
			}
		})
	}
	return pool
}

// BenchmarkPages serves each page of the dashboard over a queue of 1,000,000 jobs; ns/op is
// the time a page takes to answer, database round trips included. The overview reads the
// counts its sampler keeps; overview-counting-anew counts the whole table on every request,
// which is what the sampler does in the background once per Config.StatsMaxAge.
func BenchmarkPages(b *testing.B) {
	pool := benchQueue(b)
	client, err := ordered.NewClient(pool, nil)
	if err != nil {
		b.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	shared, err := orderedui.New(client, &orderedui.Config{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(shared.Close)
	fresh, err := orderedui.New(client, &orderedui.Config{Logger: quiet, StatsMaxAge: time.Nanosecond})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(fresh.Close)
	pages := []struct {
		name, path string
		h          http.Handler
	}{
		{"overview", "/", shared},
		{"overview-fragment", "/?fragment=1", shared},
		{"overview-counting-anew", "/", fresh},
		{"blocked", "/blocked", shared},
		{"blocked-last-page", "/blocked?after_key=cust-0099000&after_seq=5", shared},
		{"failed", "/failed", shared},
		{"failed-deep-page", "/failed?after_key=cust-0098000&after_seq=5", shared},
		{"failed-prefix", "/failed?prefix=cust-00500", shared},
		{"failed-kind-error", "/failed?kind=order.created&error=customer+4200", shared},
		{"failed-blocking", "/failed?blocking=yes&prefix=cust-009", shared},
		{"key", "/keys?key=cust-0050000", shared},
		{"key-missing", "/keys?key=cust-00500", shared},
		{"job", "/jobs/500005", shared},
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			serve := func() {
				rec := httptest.NewRecorder()
				p.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p.path, nil))
				if rec.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", p.path, rec.Code, rec.Body.String())
				}
			}
			serve() // warms the dashboard's cache and PostgreSQL's, outside the timing
			for b.Loop() {
				serve()
			}
		})
	}
}
