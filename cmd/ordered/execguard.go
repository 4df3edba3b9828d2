package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// execGuardName is the hidden subcommand that supervises one job's --exec command.
const execGuardName = "__exec-guard"

// controlFD is the guard's end of its control pipe, whose other end only the worker holds.
const controlFD = 3

// execGuardCmd is the supervisor that the worker starts for each job (see execHandler). It
// runs COMMAND through /bin/sh in a process group of its own, as a child subreaper, so that
// every process COMMAND starts stays its descendant, also one that leaves the group or whose
// parent exits. It terminates the whole tree (SIGTERM, then SIGKILL after --grace) when its
// control pipe reaches EOF (the worker stopped the job, or died, even by SIGKILL), when it is
// sent SIGTERM or SIGINT, and when COMMAND exits leaving processes behind. It exits only once
// no descendant is left, with COMMAND's exit status, or 128+N if a signal N ended COMMAND.
func (a *app) execGuardCmd() *cobra.Command {
	var grace time.Duration
	cmd := &cobra.Command{
		Use:    execGuardName + " --grace DURATION -- COMMAND",
		Short:  "Supervise one job's --exec command (started by ordered work)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			code, err := superviseCommand(cmd.Context(), args[0], grace)
			if err != nil {
				return err
			}
			os.Exit(code)
			return nil
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", killGraceDefault, "time between SIGTERM and SIGKILL")
	return cmd
}

// superviseCommand runs command until it and everything it started are gone and returns its
// exit code. ctx is cancelled by SIGTERM or SIGINT (see run): caught, so that COMMAND does not
// inherit them ignored.
func superviseCommand(ctx context.Context, command string, grace time.Duration) (int, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(controlFD, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return 0, errors.New(execGuardName + " runs only under ordered work (no control pipe)")
	}
	syscall.CloseOnExec(controlFD)
	control := os.NewFile(controlFD, "control")
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("become a child subreaper: %w", err)
	}
	pid, err := syscall.ForkExec("/bin/sh", []string{"/bin/sh", "-c", command}, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		return 0, fmt.Errorf("start /bin/sh: %w", err)
	}

	t := &tree{self: os.Getpid(), pgid: pid, exited: make(chan struct{}), empty: make(chan struct{})}
	go t.reap(pid)
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, control) // the worker never writes: this returns at EOF
		close(stop)
	}()

	select {
	case <-t.exited:
	case <-stop:
	case <-ctx.Done():
	}
	select {
	case <-t.empty:
	default:
		t.terminate(grace)
	}
	<-t.exited
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
