package main

import (
	"bytes"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// The short chaos run injects every fault and ends clean.
func TestVerifyShortIsClean(t *testing.T) {
	t.Parallel()
	bin := scenarioBin(t)

	var out bytes.Buffer
	verify := exec.Command(bin, "verify", "--short")
	verify.Stdout, verify.Stderr = &out, &out
	require.NoError(t, verify.Run(), out.String())
	require.Contains(t, out.String(), "verify: clean: 4 runs, 2640 events", out.String())
	// Every run met every fault: 2 kills, 2 stalls, at least one terminated connection, 1 restart.
	require.Regexp(t, `(?m)^\s+block/transactional(\s+\d+){8}\s+2\s+2\s+[1-9]\d*\s+1\s`, out.String())
	require.Regexp(t, `(?m)^\s+skip/at-least-once(\s+\d+){8}\s+2\s+2\s+[1-9]\d*\s+1\s`, out.String())
}
