package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

const demoTestdata = "../../testdata/demo/events.jsonl"

// The embedded demo stream and its copy in testdata are the same events.
func TestDemoStreamMatchesTestdata(t *testing.T) {
	t.Parallel()
	want := demoStreamJSONL(demoStream(demoCustomers))
	if os.Getenv("ORDERED_UPDATE_DEMO_STREAM") != "" {
		require.NoError(t, os.MkdirAll(filepath.Dir(demoTestdata), 0o755))
		require.NoError(t, os.WriteFile(demoTestdata, want, 0o644))
	}
	got, err := os.ReadFile(demoTestdata)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "testdata/demo/events.jsonl differs from demoStream; regenerate with ORDERED_UPDATE_DEMO_STREAM=1")
}
