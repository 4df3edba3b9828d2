package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/orderedq/ordered/ordered"
)

// Exit codes of the --exec command.
const (
	exitPermanent = 65 // EX_DATAERR: the job can never succeed
	// killGrace is how long a command whose claim was lost gets between SIGTERM and SIGKILL.
	killGrace = 5 * time.Second
)

// execHandler runs command once per job (see workCmd).
func execHandler(command string, a *app) ordered.HandlerFunc {
	return func(ctx context.Context, job *ordered.Job) error {
		cmd := exec.Command("/bin/sh", "-c", command)
		cmd.Stdin = bytes.NewReader(job.Payload)
		cmd.Stdout, cmd.Stderr = a.stdout, a.stderr
		cmd.Env = append(os.Environ(),
			"ORDERED_JOB_ID="+strconv.FormatInt(job.ID, 10),
			"ORDERED_KEY="+job.Key,
			"ORDERED_SEQ="+strconv.FormatInt(job.Seq, 10),
			"ORDERED_ATTEMPT="+strconv.Itoa(job.Attempt),
			"ORDERED_KIND="+job.Kind,
		)
		// Its own process group, so a lost claim terminates everything it started; and killed
		// if the worker dies, so no command outlives it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start command: %w", err)
		}
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()

		var err error
		select {
		case err = <-waited:
		case <-ctx.Done():
			terminateGroup(cmd.Process.Pid, waited)
			return context.Cause(ctx)
		}
		var exit *exec.ExitError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &exit) && exit.ExitCode() == exitPermanent:
			return ordered.Permanent(fmt.Errorf("command exited with status %d (EX_DATAERR)", exitPermanent))
		case errors.As(err, &exit) && exit.ExitCode() >= 0:
			return fmt.Errorf("command exited with status %d", exit.ExitCode())
		default:
			return fmt.Errorf("command: %w", err)
		}
	}
}

// terminateGroup sends SIGTERM to a process group, then SIGKILL if it outlives killGrace.
func terminateGroup(pid int, waited <-chan error) {
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-waited:
	case <-time.After(killGrace):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-waited
	}
	// Whatever the shell left behind in the group goes too.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}
