package ordered_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/orderedq/ordered/internal/testdb"
)

// exampleQueues are the examples' queues, dropped when the tests end.
var (
	exampleQueuesMu sync.Mutex
	exampleQueues   []*testdb.Queue
)

const exampleTablesSQL = `
CREATE TABLE invoices (id text PRIMARY KEY, paid boolean NOT NULL DEFAULT false);
INSERT INTO invoices (id) VALUES ('in_1'), ('in_2');
CREATE TABLE ledger (n bigserial, entry_id text PRIMARY KEY, entry jsonb NOT NULL);`

func TestMain(m *testing.M) {
	// The process tests re-execute this test binary as a worker process.
	if os.Getenv(workerProcessEnv) != "" {
		os.Exit(workerProcessMain())
	}
	os.Exit(runTests(m))
}

// exampleDatabase returns the URL of a fresh migrated queue in a schema of its own, with the
// tables the examples write to (exampleTablesSQL), so that each example runs alone.
func exampleDatabase() string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q, err := testdb.Create(ctx)
	if err == nil {
		exampleQueuesMu.Lock()
		exampleQueues = append(exampleQueues, q)
		exampleQueuesMu.Unlock()
		_, err = q.Pool.Exec(ctx, exampleTablesSQL)
	}
	if err != nil {
		log.Fatalf("examples' database: %v", err)
	}
	return q.URL
}

// runTests runs the tests and examples, checks the examples' queues' invariants and drops
// them, and checks that no test left a goroutine behind.
func runTests(m *testing.M) int {
	code := m.Run()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, q := range exampleQueues {
		switch broken, err := q.Violations(ctx); {
		case err != nil:
			fmt.Fprintln(os.Stderr, "examples' database:", err)
			code = 1
		case len(broken) > 0:
			fmt.Fprintln(os.Stderr, "examples' database: the queue's rows break its invariants:", strings.Join(broken, "; "))
			code = 1
		}
		if err := q.Drop(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "examples' database:", err)
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}
