package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/orderedq/ordered/ordered"
)

// Exit codes of the --exec command.
const (
	exitPermanent = 65 // EX_DATAERR: the job can never succeed
	// killGraceDefault is how long a command that must stop gets between SIGTERM and SIGKILL,
	// unless the lease is too short for it (see workCmd).
	killGraceDefault = 5 * time.Second
)

// execConfig is what the exec handler needs from the work command's flags.
type execConfig struct {
	command string
	// grace is how long the command's processes get between SIGTERM and SIGKILL.
	grace time.Duration
	// env is the environment of every command, before the job's variables.
	env []string
}

// selfExe is this very binary, even once an upgrade replaced or removed its file: the guard of
// each command runs it.
const selfExe = "/proc/self/exe"

// execHandler runs the command once per job (see workCmd), each under a guard process
// (execGuardCmd) that holds the read end of a pipe whose write end only this process holds.
// Closing it, or dying, makes the guard terminate the command's whole process tree: SIGTERM,
// then SIGKILL after the grace. The handler returns once the guard exited, so no process of a
// command outlives its job's handler.
func execHandler(c execConfig, a *app) ordered.HandlerFunc {
	return func(ctx context.Context, job *ordered.Job) error {
		control, keep, err := os.Pipe() // both close-on-exec: no other child inherits them
		if err != nil {
			return fmt.Errorf("control pipe: %w", err)
		}
		defer keep.Close()
		cmd := exec.Command(selfExe, execGuardName, "--grace", c.grace.String(), "--", c.command)
		cmd.Args[0] = os.Args[0]
		cmd.Stdin = bytes.NewReader(job.Payload)
		cmd.Stdout, cmd.Stderr = a.stdout, a.stderr
		cmd.Env = append(c.env[:len(c.env):len(c.env)],
			"ORDERED_JOB_ID="+strconv.FormatInt(job.ID, 10),
			"ORDERED_KEY="+job.Key,
			"ORDERED_SEQ="+strconv.FormatInt(job.Seq, 10),
			"ORDERED_ATTEMPT="+strconv.Itoa(job.Attempt),
			"ORDERED_KIND="+job.Kind,
			"ORDERED_CLAIM_VERSION="+strconv.FormatInt(job.ClaimVersion, 10),
			"ORDERED_IDEMPOTENCY_KEY="+job.IdempotencyKey(),
		)
		cmd.ExtraFiles = []*os.File{control} // the guard's controlFD
		// A group of its own, so that a ^C meant for the worker (which drains) does not reach it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		err = cmd.Start()
		control.Close()
		if err != nil {
			return fmt.Errorf("start command: %w", err)
		}
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()

		select {
		case err = <-waited:
		case <-ctx.Done():
			keep.Close() // the guard terminates the command: SIGTERM now, SIGKILL after the grace
			<-waited
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

// commandEnv is the environment of the commands: environ without the worker's database
// credentials (DATABASE_URL and libpq's PG* variables), unless withDatabase; then with
// DATABASE_URL set to databaseURL, the --database-url the worker connects with, if any.
func commandEnv(environ []string, databaseURL string, withDatabase bool) []string {
	if withDatabase {
		if databaseURL != "" {
			return append(environ[:len(environ):len(environ)], "DATABASE_URL="+databaseURL)
		}
		return environ
	}
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if name == "DATABASE_URL" || strings.HasPrefix(name, "PG") {
			continue
		}
		out = append(out, kv)
	}
	return out
}
