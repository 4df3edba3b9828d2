package execguard

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Name is the hidden subcommand of the binary that runs the guard: `Name --grace DURATION --
// COMMAND` must reach Supervise.
const Name = "__exec-guard"

// controlFD is the guard's end of its control pipe, whose other end only the caller of Run
// holds. resultFD, if open, is the write end of its result pipe: a guard that ended its command
// at the fence writes fencedMark there before it exits, as the command's exit status cannot
// tell it (a command may exit 0 on SIGTERM).
const (
	controlFD  = 3
	resultFD   = 4
	fencedMark = 'F'
)

// ErrFenced is returned by Run when the guard ended the command because the job's fence
// passed: no lease renewal moved it on in time, so the command was stopped short, whatever
// its exit status.
var ErrFenced = errors.New("the guard ended the command at the job's fence (no lease renewal reached it in time)")

// selfExe is this very binary, even once an upgrade replaced or removed its file.
const selfExe = "/proc/self/exe"

// Command is a shell command to run under a guard.
type Command struct {
	// Shell is run through /bin/sh -c.
	Shell string
	// Grace is how long the command's processes get between SIGTERM and SIGKILL.
	Grace time.Duration
	// Fence, if set, is when the guard terminates the command by its own clock (zero: none),
	// asked again at times up to fencePollMax apart: it holds the command to the deadline also
	// when the caller can no longer act (stopped by SIGSTOP, or in a debugger), and a later
	// answer moves the deadline on.
	Fence func() time.Time
	// Env is the command's whole environment.
	Env            []string
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// Run runs c under a guard process and returns once the guard has exited and no process of c
// is left, also when the guard was killed outright (see startGuard): nil when the command
// exited 0, an *exec.ExitError with the command's exit status (128+N if a signal N ended it)
// otherwise, and ErrFenced when the guard ended it at the fence. When ctx is done first, the
// guard terminates the command's tree and Run returns context.Cause(ctx) once it is gone.
func Run(ctx context.Context, c Command) error {
	control, keep, err := os.Pipe() // both close-on-exec: no other child inherits them
	if err != nil {
		return fmt.Errorf("control pipe: %w", err)
	}
	defer keep.Close()
	result, written, err := os.Pipe()
	if err != nil {
		control.Close()
		return fmt.Errorf("result pipe: %w", err)
	}
	defer result.Close()
	cmd := exec.Command(selfExe, Name, "--grace", c.Grace.String(), "--", c.Shell)
	cmd.Args[0] = os.Args[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.Stdin, c.Stdout, c.Stderr
	cmd.Env = c.Env
	cmd.ExtraFiles = []*os.File{control, written} // the guard's controlFD and resultFD
	// A group of its own, so that a ^C meant for the caller (which drains) does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = startGuard(cmd)
	control.Close()
	written.Close()
	if err != nil {
		return fmt.Errorf("start command: %w", err)
	}
	waited := make(chan error, 1)
	go func() {
		err := waitGuard(cmd, c.Grace)
		// The guard has exited: its end of the result pipe is closed, so this read ends.
		if mark, _ := io.ReadAll(result); len(mark) > 0 && mark[0] == fencedMark {
			err = ErrFenced
		}
		waited <- err
	}()
	var sent time.Time
	poll := time.NewTimer(time.Duration(1<<63 - 1))
	defer poll.Stop()
	if c.Fence != nil {
		sent = c.sendFence(keep, sent, poll)
	}
	for {
		select {
		case err := <-waited:
			return err
		case <-ctx.Done():
			keep.Close() // the guard terminates the command: SIGTERM now, SIGKILL after the grace
			<-waited
			return context.Cause(ctx)
		case <-poll.C:
			sent = c.sendFence(keep, sent, poll)
		}
	}
}

// sendFence writes c's fence on the control pipe if it is not the one sent last, and sets poll
// for the next look: fencePollMax apart, closer as the fence nears (a quarter of what is
// left), so that a fence moved on by a renewal reaches the guard before the old one passes;
// once it has passed, the guard is ending the command. A zero fence is none. A write that
// fails finds the guard gone, or not reading.
func (c *Command) sendFence(keep *os.File, sent time.Time, poll *time.Timer) time.Time {
	f := c.Fence()
	if !f.IsZero() && !f.Equal(sent) {
		_ = keep.SetWriteDeadline(time.Now().Add(fenceWriteTimeout))
		_ = WriteFence(keep, f)
		sent = f
	}
	next := fencePollMax
	if left := time.Until(f); !f.IsZero() && left > 0 {
		next = min(next, max(left/4, fencePollMin))
	}
	poll.Reset(next)
	return sent
}

// How often Run asks for a Command's fence, at most and at least; how long a write of it may
// wait for the guard to read.
const (
	fencePollMax      = 100 * time.Millisecond
	fencePollMin      = time.Millisecond
	fenceWriteTimeout = time.Second
)

// WriteFence tells a guard, on its control pipe w, to terminate its command at fence (this
// process's clock): the time on the system's monotonic clock, which the guard shares, as 8
// bytes, big-endian nanoseconds.
func WriteFence(w io.Writer, fence time.Time) error {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(monotonicNow()+int64(time.Until(fence))))
	_, err := w.Write(b[:])
	return err
}

// monotonicNow is CLOCK_MONOTONIC in nanoseconds: one clock for every process of the system.
func monotonicNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// readFences reads the fences written on the control pipe (WriteFence) and passes each on,
// until the pipe ends; then it closes ended.
func readFences(control io.Reader, fences chan int64, ended chan<- struct{}) {
	defer close(ended)
	var b [8]byte
	for {
		if _, err := io.ReadFull(control, b[:]); err != nil {
			return
		}
		select { // the latest fence is the one that counts
		case <-fences:
		default:
		}
		fences <- int64(binary.BigEndian.Uint64(b[:]))
	}
}

// Supervise is the guard: it runs command until it and everything it started are gone and
// returns its exit code, or 128+N if a signal N ended it. It terminates the whole tree
// (SIGTERM, then SIGKILL after grace) when its control pipe reaches EOF, when the last fence
// written on it passes (WriteFence), when ctx is done, and when command exits leaving
// processes behind. The caller catches SIGTERM and SIGINT, so that command does not inherit
// them ignored, and does not cancel ctx on them: the guard's life is its caller's, told by the
// control pipe.
func Supervise(ctx context.Context, command string, grace time.Duration) (int, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(controlFD, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return 0, errors.New(Name + " runs only under ordered work (no control pipe)")
	}
	syscall.CloseOnExec(controlFD)
	control := os.NewFile(controlFD, "control")
	var result *os.File // none when a test runs the guard with its control pipe alone
	if err := syscall.Fstat(resultFD, &st); err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFIFO {
		syscall.CloseOnExec(resultFD)
		result = os.NewFile(resultFD, "result")
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("become a child subreaper: %w", err)
	}
	// Should the guard be killed outright, the shell gets SIGKILL: the one defence left when the
	// worker dies with it. The signal comes when the thread that forked exits, so this
	// goroutine keeps its thread to the end.
	runtime.LockOSThread()
	pid, err := syscall.ForkExec("/bin/sh", []string{"/bin/sh", "-c", command}, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return 0, fmt.Errorf("start /bin/sh: %w", err)
	}

	t := &tree{self: os.Getpid(), pgid: pid, exited: make(chan struct{}), empty: make(chan struct{})}
	go t.reap(pid)
	stop := make(chan struct{})
	fences := make(chan int64, 1)
	go readFences(control, fences, stop)

	fence := time.NewTimer(time.Duration(1<<63 - 1))
	defer fence.Stop()
	fenced := false
wait:
	for {
		select {
		case <-t.exited:
			break wait
		case <-stop:
			break wait
		case <-ctx.Done():
			break wait
		case <-fence.C:
			select {
			case at := <-fences: // a later fence came as the old one passed
				fence.Reset(time.Duration(at - monotonicNow()))
				continue
			default:
			}
			select {
			case <-t.exited: // the command ended on its own as the fence passed
			default:
				fenced = true
			}
			break wait
		case at := <-fences:
			fence.Reset(time.Duration(at - monotonicNow()))
		}
	}
	select {
	case <-t.empty:
	default:
		t.terminate(grace)
	}
	<-t.exited
	if fenced && result != nil {
		_, _ = result.Write([]byte{fencedMark})
	}
	switch ws := t.status; {
	case ws.Exited():
		return ws.ExitStatus(), nil
	case ws.Signaled():
		return 128 + int(ws.Signal()), nil
	default:
		return 1, fmt.Errorf("command ended with wait status %#x", uint32(ws))
	}
}

// tree is the process tree under a subreaper: COMMAND's shell (whose pid is its process
// group) and every process it started.
type tree struct {
	self, pgid int
	// status is the shell's wait status, set before exited is closed.
	status syscall.WaitStatus
	exited chan struct{}
	// empty is closed once no child is left: as a subreaper we inherit every orphaned
	// descendant before its parent can be reaped, so then no descendant is left either.
	empty chan struct{}
}

// reap waits for every child, the shell and the orphans it leaves to us alike.
func (t *tree) reap(shell int) {
	defer close(t.empty)
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
		case err != nil:
			return // ECHILD: nothing is left
		case pid == shell:
			t.status = ws
			close(t.exited)
		}
	}
}

// terminate sends SIGTERM to every process of the tree (and SIGCONT, so that a stopped one
// gets it), waits up to grace for the tree to empty, then sends SIGKILL until it is empty.
func (t *tree) terminate(grace time.Duration) {
	t.signal(syscall.SIGTERM)
	t.signal(syscall.SIGCONT)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-t.empty:
		return
	case <-timer.C:
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		t.signal(syscall.SIGKILL)
		select {
		case <-t.empty:
			return
		case <-tick.C: // a process that forked meanwhile
		}
	}
}

// signal sends sig to the shell's process group, at once, and to each descendant outside it,
// which reaches those that left the group; none gets it twice (a shell would run its trap
// twice). The group is signalled only while the shell is unreaped: after that its id could be
// reused, and its members are descendants anyway.
func (t *tree) signal(sig syscall.Signal) {
	group := 0
	select {
	case <-t.exited:
	default:
		if syscall.Kill(-t.pgid, sig) == nil {
			group = t.pgid
		}
	}
	for _, pid := range descendants(t.self) {
		if pgid, err := syscall.Getpgid(pid); err == nil && pgid != group {
			_ = syscall.Kill(pid, sig)
		}
	}
}
