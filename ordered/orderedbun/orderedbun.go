// Package orderedbun enqueues events through bun, so that a business change made with bun and
// its event commit or roll back together. It keeps bun out of package ordered: it unwraps the
// bun transaction and calls Client.EnqueueManySQLTx. bun may run on its own driver (pgdriver)
// or on pgx's database/sql driver (stdlib); both are tested.
package orderedbun

import (
	"context"

	"github.com/uptrace/bun"

	"github.com/orderedq/ordered/ordered"
)

// Enqueue enqueues one event through bun: inside db's transaction when db is a bun.Tx (or a
// *bun.Tx), else in a transaction of its own. Under Config.Pooler PoolerTransaction, bun must
// run on pgx's database/sql driver (stdlib), which takes the statement's exec mode from its
// arguments.
func Enqueue(ctx context.Context, c *ordered.Client, db bun.IDB, ev ordered.Event) (ordered.EnqueueResult, error) {
	results, err := EnqueueMany(ctx, c, db, []ordered.Event{ev})
	if err != nil {
		return ordered.EnqueueResult{}, err
	}
	return results[0], nil
}

// EnqueueMany enqueues a batch through bun (see Enqueue): all of it or, on any error, none of
// it.
func EnqueueMany(ctx context.Context, c *ordered.Client, db bun.IDB, events []ordered.Event) ([]ordered.EnqueueResult, error) {
	switch tx := db.(type) {
	case bun.Tx:
		return c.EnqueueManySQLTx(ctx, tx.Tx, events)
	case *bun.Tx:
		return c.EnqueueManySQLTx(ctx, tx.Tx, events)
	}
	var results []ordered.EnqueueResult
	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var err error
		results, err = c.EnqueueManySQLTx(ctx, tx.Tx, events)
		return err
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}
