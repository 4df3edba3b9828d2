package ordered_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/orderedq/ordered/ordered/internal/testdb"
)

// databaseURL is the database of the examples: a migrated queue in a schema of its own, with
// the tables the examples write to (exampleTablesSQL). Each example uses keys of its own.
var databaseURL string

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

// runTests prepares the examples' database, runs the tests and examples, and checks that none
// left a goroutine behind.
func runTests(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q, err := testdb.Create(ctx)
	if err == nil {
		_, err = q.Pool.Exec(ctx, exampleTablesSQL)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "examples' database:", err)
		return 1
	}
	databaseURL = q.URL
	code := m.Run()
	dropCtx, cancelDrop := context.WithTimeout(context.Background(), time.Minute)
	defer cancelDrop()
	if err := q.Drop(dropCtx); err != nil {
		fmt.Fprintln(os.Stderr, "examples' database:", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}
