package ordered_test

import (
	"context"
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
		_, err = c.NewWorker(h, nil)
		require.NoError(t, err, "the defaults under a lease of %v", lease)
	}
}
