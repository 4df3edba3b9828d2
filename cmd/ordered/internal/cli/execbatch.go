package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderedq/ordered/internal/execguard"
	"github.com/orderedq/ordered/ordered"
)

// batchLine is one job of a batch on the command's standard input.
type batchLine struct {
	ID             int64           `json:"id"`
	Key            string          `json:"key"`
	Seq            int64           `json:"seq"`
	Kind           string          `json:"kind"`
	Attempt        int             `json:"attempt"`
	ClaimVersion   int64           `json:"claim_version"`
	IdempotencyKey string          `json:"idempotency_key"`
	Payload        json.RawMessage `json:"payload"`
}

// batchHandlerIf builds execBatchHandler when on; nil otherwise.
func batchHandlerIf(on bool, c execConfig, a *app) func(*pgxpool.Pool) ordered.BatchHandlerFunc {
	if !on {
		return nil
	}
	return func(*pgxpool.Pool) ordered.BatchHandlerFunc { return execBatchHandler(c, a) }
}

// execBatchHandler runs the command once per batch (see workLong) under the same guard as
// execHandler: no process of it outlives the batch's claim. How far it got is read from its
// progress file once the guard has exited.
func execBatchHandler(c execConfig, a *app) ordered.BatchHandlerFunc {
	return func(ctx context.Context, jobs []*ordered.Job) (int, error) {
		var stdin bytes.Buffer
		enc := json.NewEncoder(&stdin)
		for _, j := range jobs {
			if err := enc.Encode(batchLine{ID: j.ID, Key: j.Key, Seq: j.Seq, Kind: j.Kind, Attempt: j.Attempt,
				ClaimVersion: j.ClaimVersion, IdempotencyKey: j.IdempotencyKey(), Payload: j.Payload}); err != nil {
				return 0, fmt.Errorf("encode batch: %w", err)
			}
		}
		progress, err := os.CreateTemp("", "ordered-progress-")
		if err != nil {
			return 0, fmt.Errorf("progress file: %w", err)
		}
		progress.Close()
		defer os.Remove(progress.Name())
		env := append(c.env[:len(c.env):len(c.env)],
			"ORDERED_KEY="+jobs[0].Key,
			"ORDERED_BATCH_SIZE="+strconv.Itoa(len(jobs)),
			"ORDERED_FIRST_SEQ="+strconv.FormatInt(jobs[0].Seq, 10),
			"ORDERED_LAST_SEQ="+strconv.FormatInt(jobs[len(jobs)-1].Seq, 10),
			"ORDERED_PROGRESS_FILE="+progress.Name())
		err = execguard.Run(ctx, execguard.Command{
			Shell: c.command, Grace: c.grace, Env: env, Fence: jobs[0].Fence,
			Stdin: &stdin, Stdout: a.stdout, Stderr: a.stderr,
		})
		if err == nil {
			return len(jobs), nil
		}
		done, perr := progressDone(progress.Name(), jobs)
		if perr != nil {
			// The prefix cannot be told: none of the batch counts as finished.
			done, err = 0, perr
		}
		if cause := context.Cause(ctx); cause != nil && errors.Is(err, cause) {
			return done, err
		}
		var exit *exec.ExitError
		switch {
		case perr != nil:
			return 0, err
		case errors.As(err, &exit) && exit.ExitCode() == exitPermanent:
			return done, ordered.Permanent(fmt.Errorf("command exited with status %d (EX_DATAERR)", exitPermanent))
		case errors.As(err, &exit) && exit.ExitCode() >= 0:
			return done, exitError(exit.ExitCode())
		default:
			return done, commandError(err)
		}
	}
}

// progressDone reads a batch's progress file: how many of jobs, from the first, it names in
// order. A line that is not the next job's seq is an error naming it.
func progressDone(path string, jobs []*ordered.Job) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("progress file: %w", err)
	}
	defer f.Close()
	done := 0
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		seq, err := strconv.ParseInt(text, 10, 64)
		switch {
		case err != nil:
			return 0, fmt.Errorf("progress file line %d: %q is not a seq", line, text)
		case done == len(jobs):
			return 0, fmt.Errorf("progress file line %d: seq %d is beyond the batch's last seq %d", line, seq, jobs[len(jobs)-1].Seq)
		case seq != jobs[done].Seq:
			return 0, fmt.Errorf("progress file line %d: seq %d is not the batch's next unfinished seq %d", line, seq, jobs[done].Seq)
		}
		done++
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("progress file: %w", err)
	}
	return done, nil
}
