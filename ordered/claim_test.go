package ordered_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestClaimCompleteInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "k", 1, 2, 3)

	for _, want := range []int64{1, 2, 3} {
		j := b.claimOne(t, b.client)
		require.Equal(t, want, j.Seq)
		require.Equal(t, 1, j.Attempt)
		b.claimNone(t, b.client) // the key's next job waits for this one
		require.NoError(t, b.client.Complete(b.ctx, j))
	}
	b.claimNone(t, b.client)
}
