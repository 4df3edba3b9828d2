package execguard

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Both ways of reading the process tree find a child's children.
func TestDescendants(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command("/bin/sh", "-c", `sleep 1000 & echo $! > "$0/a"; sleep 1000 & echo $! > "$0/b"; wait`, dir)
	require.NoError(t, cmd.Start())
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	var want []int
	require.Eventually(t, func() bool {
		want = []int{cmd.Process.Pid}
		for _, name := range []string{"a", "b"} {
			b, _ := os.ReadFile(filepath.Join(dir, name))
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				return false
			}
			want = append(want, pid)
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	defer func() {
		for _, pid := range want[1:] {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}()

	fromStat := childrenFromStat()
	for name, children := range map[string]func(int) []int{"task children": childrenFromTasks, "stat": fromStat} {
		got := children(cmd.Process.Pid)
		require.Contains(t, children(os.Getpid()), cmd.Process.Pid, name)
		slices.Sort(got)
		sorted := slices.Clone(want[1:])
		slices.Sort(sorted)
		require.Equal(t, sorted, got, name)
	}
	for _, pid := range want {
		require.Contains(t, descendants(os.Getpid()), pid)
	}
}
