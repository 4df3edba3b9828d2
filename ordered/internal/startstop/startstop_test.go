package startstop

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStopCancelsTheLoopAndWaitsForIt(t *testing.T) {
	t.Parallel()
	running := make(chan struct{})
	returned := false
	s := New(func(ctx context.Context) {
		close(running)
		<-ctx.Done()
		returned = true
	})
	require.NoError(t, s.Start(context.Background()))
	<-running
	select {
	case <-s.Stopped():
		t.Fatal("Stopped closed while the loop runs")
	default:
	}
	s.Stop()
	require.True(t, returned, "Stop returned before the loop did")
	<-s.Stopped()
	s.Stop() // a second Stop is a no-op
}

func TestTheEndOfStartsContextEndsTheLoop(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	s := New(func(ctx context.Context) { <-ctx.Done() })
	require.NoError(t, s.Start(ctx))
	cancel()
	<-s.Stopped()
	s.Stop()
}

func TestStopReraisesTheLoopsPanic(t *testing.T) {
	t.Parallel()
	s := New(func(context.Context) { panic("loop broke") })
	require.NoError(t, s.Start(context.Background()))
	<-s.Stopped()
	defer func() {
		r := recover()
		require.NotNil(t, r, "the loop's panic was lost")
		require.Contains(t, fmt.Sprint(r), "loop broke")
	}()
	s.Stop()
}

func TestAServiceStartsOnceAndNotAfterStop(t *testing.T) {
	t.Parallel()
	s := New(func(ctx context.Context) { <-ctx.Done() })
	require.NoError(t, s.Start(context.Background()))
	require.ErrorIs(t, s.Start(context.Background()), ErrStarted)
	s.Stop()

	unstarted := New(func(context.Context) { t.Error("a service stopped before Start ran its loop") })
	unstarted.Stop()
	<-unstarted.Stopped()
	require.ErrorIs(t, unstarted.Start(context.Background()), ErrStarted)
}
