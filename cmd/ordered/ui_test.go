package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestUIRefusesAPublicAddressWithoutCredentials(t *testing.T) {
	t.Setenv("ORDERED_UI_TOKEN", "")
	t.Setenv("ORDERED_UI_USER", "")
	t.Setenv("ORDERED_UI_PASSWORD", "")
	r := runCLI(t, "", "", "ui", "--addr", "0.0.0.0:0")
	require.Equal(t, 1, r.code)
	requireOneLineError(t, r)
	require.Contains(t, r.stderr, "ORDERED_UI_TOKEN")

	t.Setenv("ORDERED_UI_USER", "ops")
	r = runCLI(t, "", "", "ui")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "ORDERED_UI_USER and ORDERED_UI_PASSWORD go together")
}
