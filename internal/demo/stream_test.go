package demo

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

const streamTestdata = "../../testdata/demo/events.jsonl"

// The embedded demo stream and its copy in testdata are the same events.
func TestStreamMatchesTestdata(t *testing.T) {
	t.Parallel()
	want := JSONL(Stream(Customers))
	if os.Getenv("ORDERED_UPDATE_DEMO_STREAM") != "" {
		require.NoError(t, os.MkdirAll(filepath.Dir(streamTestdata), 0o755))
		require.NoError(t, os.WriteFile(streamTestdata, want, 0o644))
	}
	got, err := os.ReadFile(streamTestdata)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "testdata/demo/events.jsonl differs from Stream; regenerate with ORDERED_UPDATE_DEMO_STREAM=1")
}
