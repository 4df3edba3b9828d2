package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/orderedq/ordered/internal/execguard"
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

// execHandler runs the command once per job (see workCmd) under a guard (package
// execguard), which terminates the command's whole process tree, SIGTERM, then SIGKILL after
// the grace, when the job's context is done, when this process dies, and at the job's fence
// (Job.Fence) by the guard's own clock, so also when this process is stopped. The handler
// returns once the guard exited and, should it have been killed outright, this process ended
// what it left, so no process of a command outlives its job's handler.
func execHandler(c execConfig, a *app) ordered.HandlerFunc {
	return func(ctx context.Context, job *ordered.Job) error {
		err := execguard.Run(ctx, execguard.Command{
			Shell:  c.command,
			Grace:  c.grace,
			Fence:  job.Fence,
			Env:    append(c.env[:len(c.env):len(c.env)], jobEnv(job)...),
			Stdin:  bytes.NewReader(job.Payload),
			Stdout: a.stdout,
			Stderr: a.stderr,
		})
		if cause := context.Cause(ctx); cause != nil && errors.Is(err, cause) {
			return err
		}
		var exit *exec.ExitError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &exit) && exit.ExitCode() == exitPermanent:
			return ordered.Permanent(fmt.Errorf("command exited with status %d (EX_DATAERR)", exitPermanent))
		case errors.As(err, &exit) && exit.ExitCode() >= 0:
			return exitError(exit.ExitCode())
		default:
			return commandError(err)
		}
	}
}

// commandError is the retryable error of a command that ended without an exit status of its
// own: its guard was killed (the worker then ended what the command had started), or it was
// ended at its fence (execguard.ErrFenced).
func commandError(err error) error {
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() < 0 {
		return fmt.Errorf("the command's guard process was killed (%v); what the command started was ended", exit)
	}
	return fmt.Errorf("command: %w", err)
}

// exitError is the retryable error of a command that exited with status code. A status above
// 128 is how a shell (and the guard) reports a command that a signal ended: it is named, and
// so are the shell's own 126 and 127.
func exitError(code int) error {
	switch sig := unix.Signal(code - 128); {
	case code > 128 && unix.SignalName(sig) != "":
		return fmt.Errorf("command exited with status %d (128+%d: ended by %s)", code, int(sig), unix.SignalName(sig))
	case code == 126:
		return errors.New("command exited with status 126 (the shell found it but could not run it: not executable?)")
	case code == 127:
		return errors.New("command exited with status 127 (the shell did not find it: see the worker's stderr)")
	}
	return fmt.Errorf("command exited with status %d", code)
}

// jobEnv is the job's part of its command's environment.
func jobEnv(job *ordered.Job) []string {
	return []string{
		"ORDERED_JOB_ID=" + strconv.FormatInt(job.ID, 10),
		"ORDERED_KEY=" + job.Key,
		"ORDERED_SEQ=" + strconv.FormatInt(job.Seq, 10),
		"ORDERED_ATTEMPT=" + strconv.Itoa(job.Attempt),
		"ORDERED_KIND=" + job.Kind,
		"ORDERED_CLAIM_VERSION=" + strconv.FormatInt(job.ClaimVersion, 10),
		"ORDERED_IDEMPOTENCY_KEY=" + job.IdempotencyKey(),
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
