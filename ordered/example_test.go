package ordered_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/orderedtest"
	"github.com/orderedq/ordered/policy"
	"github.com/orderedq/ordered/schema"
)

// The README's library section, as written there, except where marked "Example:": the tests'
// database instead of DATABASE_URL, and waiting for the job instead of for a signal.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, exampleDatabase()) // Example: the README reads os.Getenv("DATABASE_URL")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if _, err := schema.Migrate(ctx, pool); err != nil { // safe from every process at once
		log.Fatal(err)
	}
	client, err := ordered.NewClient(pool, &ordered.Config{
		Lease:  30 * time.Second, // how long a claim owns its job; the worker renews it
		Policy: policy.ByKeyPrefix(policy.Skip, map[string]policy.Decision{"acct-": policy.Block}),
	})
	if err != nil {
		log.Fatal(err)
	}

	// Enqueue in your own transaction: the business change and its event commit together.
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, `UPDATE invoices SET paid = true WHERE id = $1`, "in_1"); err != nil {
		log.Fatal(err)
	}
	res, err := client.EnqueueTx(ctx, tx, ordered.Event{
		Key: "cust-42", Seq: 7, Kind: "invoice.paid", Payload: json.RawMessage(`{"invoice":"in_1"}`),
	})
	if err != nil { // errors.Is: ordered.ErrLateEvent (a later event of cust-42 started),
		// ErrDuplicateConflict ((cust-42, 7) is there with other content), ErrInvalidEvent
		log.Fatal(err) // nothing was written, and tx is aborted
	}
	// Duplicate: (cust-42, 7) was there already with the same content, nothing written (Archived
	// too: at or below cust-42's archived history, taken as run, not compared).
	log.Printf("job %d, duplicate %v", res.ID, res.Duplicate)
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}

	// A worker. A TxHandlerFunc's writes commit in one transaction with the job's completion.
	w, err := client.NewWorker(ordered.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, job *ordered.Job) error {
		_, err := tx.Exec(ctx, `INSERT INTO ledger (entry_id, entry) VALUES ($1, $2)`,
			job.IdempotencyKey(), job.Payload) // "cust-42/7", the same on every attempt
		return err // nil: done; ordered.Permanent(err): fail now; other errors and panics: retry
	}), &ordered.WorkerConfig{Workers: 16, Registerer: prometheus.DefaultRegisterer})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}

	// Example: the README waits for SIGINT or SIGTERM here:
	//	sig, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	//	defer stop()
	//	<-sig.Done()
	if _, err := orderedtest.WaitDrained(ctx, pool); err != nil {
		log.Fatal(err)
	}
	var entry string
	if err := pool.QueryRow(ctx, `SELECT entry FROM ledger WHERE entry_id = 'cust-42/7'`).Scan(&entry); err != nil {
		log.Fatal(err)
	}
	fmt.Println("ledger: cust-42/7", entry)

	// Graceful shutdown: drain for up to 30 s, then cancel what still runs.
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelDrain()
	if err := w.Stop(drainCtx); err != nil {
		cancelCtx, cancelStop := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancelStop()
		if err := w.StopAndCancel(cancelCtx); err != nil {
			log.Print("ordered: handlers still running: ", err)
		}
	}
	// Output:
	// ledger: cust-42/7 {"invoice": "in_1"}
}

// A business change and its event commit, or roll back, together.
func ExampleClient_EnqueueTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, exampleDatabase())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := ordered.NewClient(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	ev := ordered.Event{Key: "cust-7", Seq: 1, Kind: "invoice.paid", Payload: json.RawMessage(`{"invoice":"in_2"}`)}

	payInvoice := func(commit bool) ordered.EnqueueResult {
		tx, err := pool.Begin(ctx)
		if err != nil {
			log.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
		if _, err := tx.Exec(ctx, `UPDATE invoices SET paid = true WHERE id = $1`, "in_2"); err != nil {
			log.Fatal(err)
		}
		res, err := client.EnqueueTx(ctx, tx, ev)
		if err != nil {
			log.Fatal(err) // nothing was written, and tx is aborted
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				log.Fatal(err)
			}
		}
		return res
	}
	paid := func() (p bool) {
		if err := pool.QueryRow(ctx, `SELECT paid FROM invoices WHERE id = 'in_2'`).Scan(&p); err != nil {
			log.Fatal(err)
		}
		return p
	}

	payInvoice(false) // rolled back: neither the invoice nor the event changed
	fmt.Println("rolled back: paid", paid())
	res := payInvoice(true)
	fmt.Println("committed: paid", paid(), "duplicate", res.Duplicate)
	res = payInvoice(true) // the same (key, seq) again: a no-op
	fmt.Println("again: duplicate", res.Duplicate)
	// Output:
	// rolled back: paid false
	// committed: paid true duplicate false
	// again: duplicate true
}

// A worker whose handler writes its effect and completes the job in one transaction: each
// event's ledger entry is written exactly once, in seq order, whatever crashes and retries.
func ExampleTxHandlerFunc() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, exampleDatabase())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := ordered.NewClient(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	for seq := 1; seq <= 3; seq++ {
		payload := json.RawMessage(fmt.Sprintf(`{"amount": %d}`, seq*10))
		if _, err := client.Enqueue(ctx, ordered.Event{Key: "acct-9", Seq: int64(seq), Kind: "entry", Payload: payload}); err != nil {
			log.Fatal(err)
		}
	}

	handler := ordered.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, job *ordered.Job) error {
		// The worker completes the job in tx after this returns nil, and commits.
		_, err := tx.Exec(ctx, `INSERT INTO ledger (entry_id, entry) VALUES ($1, $2)`, job.IdempotencyKey(), job.Payload)
		return err
	})
	w, err := client.NewWorker(handler, &ordered.WorkerConfig{Workers: 4})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := orderedtest.WaitDrained(ctx, pool); err != nil { // in a service: wait for a signal
		log.Fatal(err)
	}

	// Graceful shutdown: a fresh context, since the one the service ran on is usually done by
	// now; let running jobs finish, then cancel what still runs.
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		cancelCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := w.StopAndCancel(cancelCtx); err != nil {
			log.Print("handlers still running: ", err)
		}
	}

	rows, err := pool.Query(ctx, `SELECT entry_id, entry FROM ledger WHERE entry_id LIKE 'acct-9/%' ORDER BY n`)
	if err != nil {
		log.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, entry string
		if err := rows.Scan(&id, &entry); err != nil {
			log.Fatal(err)
		}
		fmt.Println(id, entry)
	}
	if err := rows.Err(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// acct-9/1 {"amount": 10}
	// acct-9/2 {"amount": 20}
	// acct-9/3 {"amount": 30}
}

// byKind is a failure policy: a failed payment blocks its key, since a later payment must not
// run before it; a failed notification is skipped, since the next one may go out regardless.
type byKind struct{}

func (byKind) Decide(f *policy.Failure) policy.Decision {
	if strings.HasPrefix(f.Kind, "payment.") {
		return policy.Block
	}
	return policy.Skip
}

// A custom failure policy, and an operator's replay and skip: a failed payment blocks its key
// until it is replayed (it runs again, before the key's later payments) or skipped (the key
// moves on past it); a failed notification is skipped by the policy.
func ExampleClient_Replay() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, exampleDatabase())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := ordered.NewClient(pool, &ordered.Config{Policy: byKind{}})
	if err != nil {
		log.Fatal(err)
	}
	_, err = client.EnqueueMany(ctx, []ordered.Event{
		{Key: "pay-1", Seq: 1, Kind: "payment.capture"}, {Key: "pay-1", Seq: 2, Kind: "payment.capture"},
		{Key: "pay-2", Seq: 1, Kind: "payment.capture"}, {Key: "pay-2", Seq: 2, Kind: "payment.capture"},
		{Key: "note-1", Seq: 1, Kind: "notification.send"}, {Key: "note-1", Seq: 2, Kind: "notification.send"},
	})
	if err != nil {
		log.Fatal(err)
	}

	// Each key's first event fails for good once; its replay succeeds.
	var mu sync.Mutex
	failedOnce := map[string]bool{}
	w, err := client.NewWorker(ordered.HandlerFunc(func(ctx context.Context, job *ordered.Job) error {
		mu.Lock()
		defer mu.Unlock()
		if job.Seq == 1 && !failedOnce[job.Key] {
			failedOnce[job.Key] = true
			return ordered.Permanent(errors.New("card declined"))
		}
		return nil
	}), nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background()) //nolint:errcheck // every job has run by then

	drained, err := orderedtest.WaitDrained(ctx, pool)
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range drained.Failed {
		fmt.Printf("failed: %s/%d blocking %v: %s\n", f.Key, f.Seq, f.Blocking, f.LastError)
		switch f.Key {
		case "pay-1":
			if err := client.Replay(ctx, f.ID, ordered.ReplayParams{}); err != nil {
				log.Fatal(err)
			}
		case "pay-2":
			if _, err := client.Skip(ctx, f.ID); err != nil {
				log.Fatal(err)
			}
		}
	}
	if _, err := orderedtest.WaitDrained(ctx, pool); err != nil {
		log.Fatal(err)
	}
	jobs, err := orderedtest.Jobs(ctx, pool)
	if err != nil {
		log.Fatal(err)
	}
	for _, j := range jobs {
		if strings.HasPrefix(j.Key, "pay-") || strings.HasPrefix(j.Key, "note-") {
			fmt.Println(j.ID, j.Status)
		}
	}
	// Output:
	// failed: note-1/1 blocking false: card declined
	// failed: pay-1/1 blocking true: card declined
	// failed: pay-2/1 blocking true: card declined
	// note-1/1 failed
	// note-1/2 done
	// pay-1/1 done
	// pay-1/2 done
	// pay-2/1 failed
	// pay-2/2 done
}
