// Package invariant checks the rules that every row of a queue keeps and that no index or
// constraint of the schema states (see schema/migrations/005_hot_row_checks.sql): the tests
// of package ordered check them after every test, and the chaos run after each of its runs.
package invariant

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/jackc/pgx/v5"
)

//go:embed queries/violations.sql
var violationsSQL string

// Querier is what Violations needs of a connection: pgx.Conn, pgx.Tx and pgxpool.Pool have it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Violations returns the invariants that rows of the queue on q's search_path break, each
// as "invariant: N rows"; none when every row keeps them.
func Violations(ctx context.Context, q Querier) ([]string, error) {
	rows, err := q.Query(ctx, violationsSQL)
	if err != nil {
		return nil, fmt.Errorf("check the queue's invariants: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var name string
		var n int64
		err := r.Scan(&name, &n)
		return fmt.Sprintf("%s: broken by %d rows", name, n), err
	})
	if err != nil {
		return nil, fmt.Errorf("check the queue's invariants: %w", err)
	}
	return out, nil
}
