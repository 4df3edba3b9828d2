package execguard

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A guard killed outright (SIGKILL, the OOM killer) cannot end its command's tree. The process
// that calls Run is therefore a child subreaper too: the orphans of a dead guard come to it,
// and Run ends them before it returns, so that a job is never given back while a process of
// its command runs. Every child of that process that is not a guard Run started is such an
// orphan (a process that calls Run starts no other child), but for those it already had when
// it first called Run: children a script started before it ran exec ordered work.

var (
	adopting   sync.Once
	errAdopted error

	// guards counts, by pid, the guard processes Run started and has not yet reaped (a count,
	// should a pid be reused the moment it is freed).
	guardsMu sync.Mutex
	guards   = map[int]int{}
	// inherited are the children this process had before its first guard, by pid, with
	// their start times: they are not orphans of guards, and are left alone.
	inherited = map[int]int{}

	// sweeping lets one sweep at a time signal and reap the orphans.
	sweeping sync.Mutex
)

// startGuard starts cmd, a guard, with this process a child subreaper, and counts it among the
// guards before any sweep can look.
func startGuard(cmd *exec.Cmd) error {
	adopting.Do(func() {
		guardsMu.Lock()
		for _, pid := range children()(os.Getpid()) {
			if start, ok := startTimeOf(pid); ok {
				inherited[pid] = start
			}
		}
		guardsMu.Unlock()
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			errAdopted = fmt.Errorf("become a child subreaper: %w", err)
		}
	})
	if errAdopted != nil {
		return errAdopted
	}
	guardsMu.Lock()
	defer guardsMu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	guards[cmd.Process.Pid]++
	return nil
}

// waitGuard waits for the guard cmd to exit, then ends whatever it left (sweepOrphans).
func waitGuard(cmd *exec.Cmd, grace time.Duration) error {
	err := cmd.Wait()
	guardsMu.Lock()
	if guards[cmd.Process.Pid]--; guards[cmd.Process.Pid] == 0 {
		delete(guards, cmd.Process.Pid)
	}
	guardsMu.Unlock()
	sweepOrphans(grace)
	return err
}

// sweepOrphans ends the orphans of dead guards, as a guard ends its tree: SIGTERM (and SIGCONT)
// once to each orphan and each of its descendants, SIGKILL after grace, until no orphan is
// left. A descendant whose parent exits becomes an orphan in turn, so none is left below
// either. A guard that exited on its own left nothing: the common case reads this process's
// children once.
func sweepOrphans(grace time.Duration) {
	sweeping.Lock()
	defer sweeping.Unlock()
	termed := map[int]bool{}
	var killAt time.Time
	for {
		left, reaped := orphans()
		if len(left) == 0 && !reaped {
			return
		}
		if killAt.IsZero() {
			killAt = time.Now().Add(grace)
		}
		kill := !time.Now().Before(killAt)
		for _, pid := range left {
			for _, p := range append([]int{pid}, descendants(pid)...) {
				switch {
				case kill:
					_ = syscall.Kill(p, syscall.SIGKILL)
				case !termed[p]: // a second SIGTERM would run a shell's trap twice
					termed[p] = true
					_ = syscall.Kill(p, syscall.SIGTERM)
					_ = syscall.Kill(p, syscall.SIGCONT)
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// orphans reaps the children of this process that are not guards and have exited, and lists
// those that still run. reaped says whether it reaped one: what that one started came to
// this process when it exited, after the list was read, so the caller looks again.
func orphans() (running []int, reaped bool) {
	kids := children()(os.Getpid())
	guardsMu.Lock()
	defer guardsMu.Unlock()
	for _, pid := range kids {
		if guards[pid] > 0 {
			continue
		}
		start, had := inherited[pid]
		if had {
			if now, ok := startTimeOf(pid); !ok || now != start {
				delete(inherited, pid) // gone, and the pid reused
				had = false
			}
		}
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		if got == pid || errors.Is(err, syscall.ECHILD) {
			delete(inherited, pid)
			reaped = reaped || (got == pid && !had)
			continue // reaped now, or already
		}
		if !had {
			running = append(running, pid)
		}
	}
	return running, reaped
}
