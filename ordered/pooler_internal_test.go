package ordered

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Behind a transaction pooler the client runs its statements in a mode that keeps nothing on
// the server between round trips, unless the pool's own mode already does; elsewhere it leaves
// the pool's mode alone.
func TestExecModeForPooler(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pooler        Pooler
		pool          pgx.QueryExecMode
		describeCache bool
		want          pgx.QueryExecMode
	}{
		{PoolerNone, pgx.QueryExecModeCacheStatement, true, 0},
		{PoolerSession, pgx.QueryExecModeCacheStatement, true, 0},
		{PoolerTransaction, pgx.QueryExecModeCacheStatement, true, pgx.QueryExecModeCacheDescribe},
		{PoolerTransaction, pgx.QueryExecModeDescribeExec, true, pgx.QueryExecModeCacheDescribe},
		{PoolerTransaction, pgx.QueryExecModeCacheStatement, false, pgx.QueryExecModeExec},
		{PoolerTransaction, pgx.QueryExecModeCacheDescribe, true, 0},
		{PoolerTransaction, pgx.QueryExecModeExec, true, 0},
		{PoolerTransaction, pgx.QueryExecModeSimpleProtocol, true, 0},
	} {
		require.Equal(t, tc.want, execMode(tc.pooler, tc.pool, tc.describeCache), "%v, pool %v, description cache %v",
			tc.pooler, tc.pool, tc.describeCache)
	}
	for _, p := range []Pooler{PoolerNone, PoolerSession, PoolerTransaction} {
		got, err := ParsePooler(p.String())
		require.NoError(t, err)
		require.Equal(t, p, got)
	}
	_, err := ParsePooler("statement")
	require.ErrorContains(t, err, `ordered: unknown pooler "statement"`)
	_, err = NewClient(nil, &Config{Pooler: 7})
	require.ErrorContains(t, err, "ordered: Config.Pooler")
}
