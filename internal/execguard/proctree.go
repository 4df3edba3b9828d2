package execguard

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
)

// descendants lists the processes below pid, from /proc: the children files of its threads
// where the kernel has them (CONFIG_PROC_CHILDREN), else the parent of every process. A
// process that forks meanwhile may be missed; callers that must catch all repeat the call.
func descendants(pid int) []int {
	children := childrenFromTasks
	if _, err := os.Stat("/proc/thread-self/children"); errors.Is(err, os.ErrNotExist) {
		children = childrenFromStat()
	}
	var out []int
	for queue := []int{pid}; len(queue) > 0; queue = queue[1:] {
		kids := children(queue[0])
		out = append(out, kids...)
		queue = append(queue, kids...)
	}
	return out
}

// childrenFromTasks reads the children of every thread of pid (a child belongs to the thread
// that forked it, an orphan to any thread of its new parent).
func childrenFromTasks(pid int) []int {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil // gone
	}
	var out []int
	for _, task := range tasks {
		b, err := os.ReadFile(dir + task.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// childrenFromStat maps every process to its parent, from /proc/*/stat.
func childrenFromStat() func(int) []int {
	byParent := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := parentOf(pid); ok {
			byParent[ppid] = append(byParent[ppid], pid)
		}
	}
	return func(pid int) []int { return byParent[pid] }
}

// parentOf reads the parent pid of pid from /proc/<pid>/stat: "pid (comm) state ppid ...",
// where comm may hold spaces and parentheses.
func parentOf(pid int) (int, bool) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(fields[1])
	return ppid, err == nil
}
