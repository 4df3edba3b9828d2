package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/orderedq/ordered/ordered"
)

// enqueueChunk is how many events go in one statement; a whole input is still one transaction.
const enqueueChunk = 10_000

// maxLineBytes bounds one JSON Lines line (the payload limit plus room for the envelope).
const maxLineBytes = ordered.MaxPayloadBytesMax + 64<<10

// inputEvent is one JSON Lines line of `ordered enqueue`.
type inputEvent struct {
	Key         *string         `json:"key"`
	Seq         json.RawMessage `json:"seq"`
	Kind        string          `json:"kind"`
	Payload     json.RawMessage `json:"payload"`
	RunAt       *time.Time      `json:"run_at"`
	MaxAttempts int             `json:"max_attempts"`
}

func (a *app) enqueueCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "enqueue [FILE|-]",
		Short: "Enqueue JSON Lines events from FILE or standard input, all or nothing",
		Long: `Enqueue reads one event per line:

  {"key":"cust-42","seq":7,"kind":"invoice.paid","payload":{...},"run_at":"2026-01-02T15:04:05Z"}

key and seq are required; kind, payload, run_at (RFC 3339) and max_attempts are optional.
A bad line is reported with its line number and nothing from the input is enqueued.
An event already enqueued, or earlier in the input, with the same key, seq and content
(payload as JSON, kind, run_at, max_attempts) is counted as a duplicate, not an error;
with the same key and seq but other content it is an error, and nothing is enqueued.
An event at or below its key's archived history (see archive) is counted as a duplicate
and not run again: it cannot be compared any more, nor told from one never sent.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, name := a.stdin, "stdin"
			if len(args) == 1 && args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				in, name = f, args[0]
			}
			events, lines, err := readEvents(in)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if len(events) == 0 {
				fmt.Fprintf(a.stdout, "no events in %s\n", name)
				return nil
			}
			ctx := cmd.Context()
			client, pool, err := a.client(ctx, nil, 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			if err := client.Validate(events); err != nil {
				return lineError(name, err, lines, events)
			}
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx) //nolint:errcheck // a no-op after commit
			added, dups := 0, 0
			for lo := 0; lo < len(events); lo += enqueueChunk {
				chunk := events[lo:min(lo+enqueueChunk, len(events))]
				res, err := client.EnqueueManyTx(ctx, tx, chunk)
				if err != nil {
					return lineError(name, err, lines[lo:], chunk)
				}
				for _, r := range res {
					if r.Duplicate {
						dups++
					} else {
						added++
					}
				}
			}
			if err := tx.Commit(ctx); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "enqueued %d events from %s (%d new, %d duplicates)\n", len(events), name, added, dups)
			return nil
		},
	}
}

// readEvents parses JSON Lines; blank lines are skipped. lines[i] is the line of events[i].
func readEvents(in io.Reader) ([]ordered.Event, []int, error) {
	var events []ordered.Event
	var lines []int
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxLineBytes)
	n := 0
	for sc.Scan() {
		n++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		ev, err := parseEvent(raw)
		if err != nil {
			return nil, nil, fmt.Errorf("line %d: %w; nothing was enqueued", n, err)
		}
		events = append(events, ev)
		lines = append(lines, n)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, nil, fmt.Errorf("line %d: longer than %d bytes; nothing was enqueued", n+1, maxLineBytes)
		}
		return nil, nil, err
	}
	return events, lines, nil
}

func parseEvent(raw []byte) (ordered.Event, error) {
	var in inputEvent
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return ordered.Event{}, fmt.Errorf("not a valid event object: %v", err)
	}
	if dec.More() {
		return ordered.Event{}, errors.New("more than one JSON value on the line")
	}
	if in.Key == nil {
		return ordered.Event{}, errors.New("missing key")
	}
	if len(in.Seq) == 0 || string(in.Seq) == "null" {
		return ordered.Event{}, errors.New("missing seq")
	}
	seq, err := strconv.ParseInt(string(in.Seq), 10, 64)
	if err != nil {
		return ordered.Event{}, fmt.Errorf("seq %s is not an integer", in.Seq)
	}
	ev := ordered.Event{Key: *in.Key, Seq: seq, Kind: in.Kind, Payload: in.Payload, MaxAttempts: in.MaxAttempts}
	if in.RunAt != nil {
		ev.RunAt = *in.RunAt
	}
	return ev, nil
}

// lineError names the input line of an enqueue error.
func lineError(name string, err error, lines []int, events []ordered.Event) error {
	var invalid *ordered.InvalidEventError
	if errors.As(err, &invalid) && invalid.Index < len(lines) {
		return fmt.Errorf("%s: line %d: %s: %s; nothing was enqueued", name, lines[invalid.Index], invalid.Field, invalid.Reason)
	}
	msg := strings.TrimPrefix(err.Error(), "ordered: ")
	var late *ordered.LateEventError
	if errors.As(err, &late) {
		for i, ev := range events {
			if ev.Key == late.Key && ev.Seq == late.Seq {
				return fmt.Errorf("%s: line %d: %s; nothing was enqueued", name, lines[i], msg)
			}
		}
	}
	return fmt.Errorf("%s: %s; nothing was enqueued", name, msg)
}
