package ordered_test

import (
	"context"
	"database/sql"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/orderedtest"
)

// A bad Config is refused by NewClient with an error naming the field.
func TestNewClientRejectsBadConfig(t *testing.T) {
	t.Parallel()
	cases := []struct {
		cfg   ordered.Config
		field string
	}{
		{ordered.Config{Lease: time.Millisecond}, "Config.Lease"},
		{ordered.Config{MaxAttempts: -1}, "Config.MaxAttempts"},
		{ordered.Config{MaxAttempts: overInt32()}, "Config.MaxAttempts"},
		{ordered.Config{MaxKeyBytes: ordered.MaxKeyBytesMax + 1}, "Config.MaxKeyBytes"},
		{ordered.Config{MaxBacklog: -1}, "Config.MaxBacklog"},
		{ordered.Config{MaxPayloadBytes: ordered.MaxPayloadBytesMax + 1}, "Config.MaxPayloadBytes"},
	}
	for _, c := range cases {
		_, err := ordered.NewClient(nil, &c.cfg)
		require.ErrorContains(t, err, c.field)
	}
	_, err := ordered.NewClient(nil, &ordered.Config{MaxAttempts: math.MaxInt32})
	require.NoError(t, err)
}

// A bad WorkerConfig is refused by NewWorker with an error naming the field; zero fields take
// their defaults, which are valid for any lease a Client accepts.
func TestNewWorkerRejectsBadConfig(t *testing.T) {
	t.Parallel()
	c, err := ordered.NewClient(nil, &ordered.Config{Lease: time.Second})
	require.NoError(t, err)
	h := ordered.HandlerFunc(func(context.Context, *ordered.Job) error { return nil })
	cases := []struct {
		cfg   ordered.WorkerConfig
		field string
	}{
		{ordered.WorkerConfig{Workers: -1}, "WorkerConfig.Workers"},
		{ordered.WorkerConfig{PollInterval: ordered.PollIntervalMin - 1}, "WorkerConfig.PollInterval"},
		{ordered.WorkerConfig{HeartbeatInterval: time.Second}, "WorkerConfig.HeartbeatInterval"},
		{ordered.WorkerConfig{HeartbeatInterval: -time.Millisecond}, "WorkerConfig.HeartbeatInterval"},
		{ordered.WorkerConfig{StopGrace: 800 * time.Millisecond}, "WorkerConfig.StopGrace"},
		{ordered.WorkerConfig{MaxAttempts: -1}, "WorkerConfig.MaxAttempts"},
		{ordered.WorkerConfig{MaintenanceInterval: -time.Second}, "WorkerConfig.MaintenanceInterval"},
	}
	for _, tc := range cases {
		_, err := c.NewWorker(h, &tc.cfg)
		require.ErrorContains(t, err, "ordered: "+tc.field, "%+v", tc.cfg)
	}
	for _, lease := range []time.Duration{ordered.LeaseMin, ordered.LeaseDefault} {
		c, err := ordered.NewClient(nil, &ordered.Config{Lease: lease})
		require.NoError(t, err)
		_, err = c.NewWorker(h, nil) // valid: only the missing pool is refused
		require.ErrorIs(t, err, ordered.ErrNoPool, "the defaults under a lease of %v", lease)
	}
}

// A Client given no pool serves a producer that enqueues only in transactions of its own
// (pgx's or database/sql's) and Validate; every other method returns ErrNoPool, not a panic,
// and NewWorker refuses at once. Each exported method is called, so a new one is checked too.
func TestClientWithoutAPool(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	ctx := context.Background()
	_, err := ordered.NewClient(nil, &ordered.Config{MaxBacklog: 10})
	require.ErrorContains(t, err, "Config.MaxBacklog needs a pool")
	c, err := ordered.NewClient(nil, nil)
	require.NoError(t, err)

	require.NoError(t, c.Validate([]ordered.Event{{Key: "k", Seq: 1}}))
	tx, err := q.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = c.EnqueueTx(ctx, tx, ordered.Event{Key: "k", Seq: 1})
	require.NoError(t, err)
	_, err = c.EnqueueManyTx(ctx, tx, []ordered.Event{{Key: "k", Seq: 2}, {Key: "other", Seq: 1}})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	db := stdlib.OpenDBFromPool(q.Pool)
	defer db.Close()
	sqlTx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = c.EnqueueSQLTx(ctx, sqlTx, ordered.Event{Key: "k", Seq: 3})
	require.NoError(t, err)
	_, err = c.EnqueueManySQLTx(ctx, sqlTx, []ordered.Event{{Key: "k", Seq: 4}})
	require.NoError(t, err)
	require.NoError(t, sqlTx.Commit())
	var stored int
	require.NoError(t, q.Pool.QueryRow(ctx, `SELECT count(*) FROM ordered_jobs_now`).Scan(&stored))
	require.Equal(t, 5, stored)

	pgxTx := reflect.TypeFor[pgx.Tx]()
	sqlTxType := reflect.TypeFor[*sql.Tx]()
	v := reflect.ValueOf(c)
	checked := 0
	for i := range v.NumMethod() {
		m := v.Type().Method(i)
		ft := m.Type
		args := []reflect.Value{v}
		takesTx := false
		for j := 1; j < ft.NumIn(); j++ {
			at := ft.In(j)
			switch {
			case at == pgxTx || at == sqlTxType:
				takesTx = true
			case at == reflect.TypeFor[context.Context]():
				args = append(args, reflect.ValueOf(ctx))
				continue
			case at == reflect.TypeFor[ordered.Handler]():
				args = append(args, reflect.ValueOf(ordered.HandlerFunc(func(context.Context, *ordered.Job) error { return nil })))
				continue
			case at.Kind() == reflect.Func:
				args = append(args, reflect.MakeFunc(at, func([]reflect.Value) []reflect.Value {
					panic("not called")
				}))
				continue
			case at == reflect.TypeFor[ordered.Event]():
				args = append(args, reflect.ValueOf(ordered.Event{Key: "k", Seq: 9}))
				continue
			case at == reflect.TypeFor[[]ordered.Event]():
				args = append(args, reflect.ValueOf([]ordered.Event{{Key: "k", Seq: 9}}))
				continue
			case at.Kind() >= reflect.Int && at.Kind() <= reflect.Int64: // a limit, an id: 1
				args = append(args, reflect.ValueOf(1).Convert(at))
				continue
			case at.Kind() == reflect.Pointer:
				args = append(args, reflect.New(at.Elem()))
				continue
			case at.Kind() == reflect.Slice: // one element, so that the call has work to do
				s := reflect.MakeSlice(at, 1, 1)
				if at.Elem().Kind() == reflect.Pointer {
					s.Index(0).Set(reflect.New(at.Elem().Elem()))
				}
				args = append(args, s)
				continue
			}
			args = append(args, reflect.Zero(at))
		}
		last := ft.NumOut() - 1
		if takesTx || last < 0 || ft.Out(last) != reflect.TypeFor[error]() || m.Name == "Validate" {
			continue
		}
		var out []reflect.Value
		require.NotPanics(t, func() { out = m.Func.Call(args) }, m.Name)
		err, _ := out[last].Interface().(error)
		require.ErrorIs(t, err, ordered.ErrNoPool, m.Name)
		checked++
	}
	require.Greater(t, checked, 30, "the methods that need the pool")
	many := make([]ordered.Event, 1000) // written in a transaction of the client's own
	for i := range many {
		many[i] = ordered.Event{Key: "many", Seq: int64(i + 1)}
	}
	_, err = c.EnqueueMany(ctx, many)
	require.ErrorIs(t, err, ordered.ErrNoPool)
}
