package main

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// verifyExec runs `ordered verify --exec script` on a small workload, through real worker
// processes under every fault, and returns its report (stdout) and exit code. A run that is not
// clean says so on stderr in one line.
func verifyExec(t *testing.T, script string) (string, int) {
	t.Helper()
	bin := scenarioBin(t)
	path, err := filepath.Abs(filepath.Join("../../testdata/verifyexec", script))
	require.NoError(t, err)
	var out, stderr bytes.Buffer
	cmd := exec.Command(bin, "verify", "--exec", path, "--keys", "8", "--per-key", "8")
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if err != nil {
		require.True(t, errors.As(err, &exit), "%v\n%s%s", err, out.String(), stderr.String())
		require.Equal(t, "ordered: verify: the run is not clean\n", stderr.String(), out.String())
		return out.String(), exit.ExitCode()
	}
	return out.String(), 0
}

// Every fault was injected: 2 kills, 2 stalls, at least one terminated connection, 1 restart.
const allFaults = `(?m)^faults:  2 kills \(-9\), 2 stalls past the lease, [1-9]\d* connections terminated, 1 PostgreSQL restarts`

// An idempotent command (it records its event's effect only if it is not there yet) gives a
// clean run through every fault, and exit 0.
func TestVerifyExecIdempotentCommandIsClean(t *testing.T) {
	t.Parallel()
	out, code := verifyExec(t, "idempotent.sh")
	require.Equal(t, 0, code, out)
	require.Regexp(t, allFaults, out)
	require.Contains(t, out, "effects: 64 lines in $ORDERED_VERIFY_EFFECTS: 0 duplicate, 0 missing, 0 naming no event, 0 malformed", out)
	require.Regexp(t, `(?m)^verify: clean: 64 events through the command, no lost job, no order inversion, no duplicate or missing effect\n\z`, out)
}

// A command that records its effect and fails, so that its retry records it again, is caught:
// duplicate effects, and a non-zero exit.
func TestVerifyExecCatchesDuplicateEffects(t *testing.T) {
	t.Parallel()
	out, code := verifyExec(t, "retry-duplicate.sh")
	require.Equal(t, 1, code, out)
	require.Regexp(t, allFaults, out)
	require.Regexp(t, `(?m)^  key-\d{3}/3: effect applied [2-9] times$`, out)
	require.Regexp(t, `(?m)^verify: NOT CLEAN: (.*, )?[1-9]\d* duplicate effects(,|$)`, out)
}

// A command that records a key's seq 3 after its seq 4 is caught: order inversions, and a
// non-zero exit.
func TestVerifyExecCatchesEffectsOutOfOrder(t *testing.T) {
	t.Parallel()
	out, code := verifyExec(t, "late-effect.sh")
	require.Equal(t, 1, code, out)
	require.Regexp(t, `(?m)^  (key-\d{3})/4's effect landed before (key-\d{3})/3's$`, out)
	require.Regexp(t, `(?m)^verify: NOT CLEAN: (.*, )?8 order inversions(,|$)`, out)
	require.NotContains(t, out, "duplicate effects", out)
}

// A command that exits 0 without doing anything for one key is caught: that key's effects are
// missing (every one of its 8 events), and a non-zero exit. The others' effects, recorded with
// their claim versions, are clean.
func TestVerifyExecCatchesMissingEffects(t *testing.T) {
	t.Parallel()
	out, code := verifyExec(t, "skips-key.sh")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "effects: 56 lines in $ORDERED_VERIFY_EFFECTS: 0 duplicate, 8 missing, 0 naming no event, 0 malformed", out)
	require.Regexp(t, `(?m)^  key-002/0 is done but its effect is missing$`, out)
	require.Regexp(t, `(?m)^verify: NOT CLEAN: 8 missing effects\n\z`, out)
}
