package main

import (
	"bytes"
	"os/exec"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// The short hosts-mode run: worker processes on 3 hosts (network namespaces) through a slow
// link, dropped connections and two partitions, each longer than the lease. The history is
// clean, each partition cut a host off mid-job, another host took its jobs over, and the
// host claimed again by itself after the heal. Without namespaces (not root, no iproute2) it
// fails with the reason.
func TestVerifyHostsShortIsClean(t *testing.T) {
	t.Parallel()
	bin := scenarioBin(t)

	var out bytes.Buffer
	verify := exec.Command(bin, "verify", "--hosts", "3", "--short")
	verify.Stdout, verify.Stderr = &out, &out
	require.NoError(t, verify.Run(), out.String())
	require.Contains(t, out.String(), "verify: clean: 2 runs, ", out.String())
	rows := regexp.MustCompile(`(?m)^\s+(block/transactional|skip/at-least-once)\s+ov\d+-\d+\s+(\d+)\s+(\S+)\s+(\S+)\s*$`).
		FindAllStringSubmatch(out.String(), -1)
	require.Len(t, rows, 4, "two partitions a run: %s", out.String())
	for _, r := range rows {
		require.NotEqual(t, "0", r[2], "the partition cut the host off mid-job: %s", r[0])
		require.NotEqual(t, "never", r[3], "another host took the jobs over: %s", r[0])
		require.NotEqual(t, "never", r[4], "the host claimed again after the heal: %s", r[0])
	}
}
