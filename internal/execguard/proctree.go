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
	childrenOf := children()
	var out []int
	for queue := []int{pid}; len(queue) > 0; queue = queue[1:] {
		kids := childrenOf(queue[0])
		out = append(out, kids...)
		queue = append(queue, kids...)
	}
	return out
}

// children is how this system lists a process's children (see descendants).
func children() func(int) []int {
	if _, err := os.Stat("/proc/thread-self/children"); errors.Is(err, os.ErrNotExist) {
		return childrenFromStat()
	}
	return childrenFromTasks
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

// parentOf reads the parent pid of pid from /proc/<pid>/stat.
func parentOf(pid int) (int, bool) {
	return statField(pid, 1)
}

// startTimeOf reads when pid started, in clock ticks since boot, from /proc/<pid>/stat: with
// the pid, it names one process, should the pid be reused.
func startTimeOf(pid int) (int, bool) {
	return statField(pid, 19)
}

// statField reads the n-th field after the command name of /proc/<pid>/stat: "pid (comm)
// state ppid ...", where comm may hold spaces and parentheses; field 0 is the state.
func statField(pid, n int) (int, bool) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) <= n {
		return 0, false
	}
	v, err := strconv.Atoi(fields[n])
	return v, err == nil
}
