package ordered_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
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
