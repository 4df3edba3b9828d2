package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/orderedq/ordered/ordered"
)

// blockedKeysShown bounds the blocked keys that status lists.
const blockedKeysShown = 20

// StatusJSON is the stable shape of `ordered status --json`.
type StatusJSON struct {
	Queued             int64            `json:"queued"`
	Running            int64            `json:"running"`
	Done               int64            `json:"done"`
	Failed             int64            `json:"failed"`
	Blocked            int64            `json:"blocked"`
	BlockedKeyCount    int64            `json:"blocked_key_count"`
	BlockedKeys        []BlockedKeyJSON `json:"blocked_keys"`
	OldestReadySeconds float64          `json:"oldest_ready_seconds"`
	ExpiredLeases      int64            `json:"expired_leases"`
	GapKeyCount        int64            `json:"gap_key_count"`
	GapBlockedKeyCount int64            `json:"gap_blocked_key_count"`
	OldestGapSeconds   float64          `json:"oldest_gap_seconds"`
}

// BlockedKeyJSON is a blocked key of StatusJSON.
type BlockedKeyJSON struct {
	Key   string `json:"key"`
	JobID int64  `json:"job_id"`
	Seq   int64  `json:"seq"`
	Error string `json:"error"`
}

const statusLong = `Status counts the queue's jobs now (it reads the whole table). Jobs by status, which add up
to all jobs: queued, running, done, failed (failed for good, holding nothing: the skip
policy, or skipped) and blocked (failed for good and holding its key until replayed or
skipped). Then the keys that blocked jobs hold, the age of the oldest job ready to run (0s
when none waits), the running jobs whose lease has expired, the contiguous keys waiting on a
gap (with those their gap policy blocked, and the oldest gap's age: shown when there are
any; ordered gaps lists them), and the first blocked jobs with their keys.`

func (a *app) statusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show job counts, blocked keys, the oldest ready job's age and expired leases",
		Long:  statusLong,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out, oldestReady, err := a.status(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a, out)
			}
			return a.printStatus(out, oldestReady)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// status reads the queue's figures and its first blocked keys, and the age of the oldest ready
// job as it was read.
func (a *app) status(ctx context.Context) (StatusJSON, time.Duration, error) {
	var out StatusJSON
	client, pool, err := a.client(ctx, nil, 2)
	if err != nil {
		return out, 0, err
	}
	defer pool.Close()
	stats, err := client.Stats(ctx)
	if err != nil {
		return out, 0, err
	}
	blocked, err := client.BlockedKeys(ctx, blockedKeysShown)
	if err != nil {
		return out, 0, err
	}
	out = StatusJSON{
		Queued: stats.Queued, Running: stats.Running, Done: stats.Done, Failed: stats.Failed,
		Blocked: stats.Blocked, BlockedKeyCount: stats.BlockedKeys, BlockedKeys: []BlockedKeyJSON{},
		OldestReadySeconds: stats.OldestReady.Seconds(), ExpiredLeases: stats.ExpiredLeases,
		GapKeyCount: stats.GapKeys, GapBlockedKeyCount: stats.GapBlockedKeys, OldestGapSeconds: stats.OldestGap.Seconds(),
	}
	for _, k := range blocked {
		out.BlockedKeys = append(out.BlockedKeys, BlockedKeyJSON{Key: k.Key, JobID: k.JobID, Seq: k.Seq, Error: k.LastError})
	}
	return out, stats.OldestReady, nil
}

// printStatus prints the figures as a table, then the blocked keys.
func (a *app) printStatus(out StatusJSON, oldestReady time.Duration) error {
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "queued\t%d\n", out.Queued)
	fmt.Fprintf(tw, "running\t%d\n", out.Running)
	fmt.Fprintf(tw, "done\t%d\n", out.Done)
	fmt.Fprintf(tw, "failed\t%d\n", out.Failed)
	fmt.Fprintf(tw, "blocked\t%d\n", out.Blocked)
	fmt.Fprintf(tw, "blocked keys\t%d\n", out.BlockedKeyCount)
	fmt.Fprintf(tw, "oldest ready job\t%s\n", oldestReady.Round(time.Millisecond))
	fmt.Fprintf(tw, "expired leases\t%d\n", out.ExpiredLeases)
	if out.GapKeyCount > 0 { // contiguous keys only (ordered gaps)
		fmt.Fprintf(tw, "keys waiting on a gap\t%d (%d blocked)\n", out.GapKeyCount, out.GapBlockedKeyCount)
		fmt.Fprintf(tw, "oldest gap\t%s\n", time.Duration(out.OldestGapSeconds*float64(time.Second)).Round(time.Second))
	}
	if err := tw.Flush(); err != nil || len(out.BlockedKeys) == 0 {
		return err
	}
	fmt.Fprintln(a.stdout)
	tw = tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BLOCKED KEY\tJOB\tSEQ\tERROR")
	for _, k := range out.BlockedKeys {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", cell(k.Key), k.JobID, k.Seq, cell(oneLine(k.Error)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if shown := int64(len(out.BlockedKeys)); shown < out.Blocked {
		fmt.Fprintf(a.stdout, "... and %d more (ordered failed)\n", out.Blocked-shown)
	}
	return nil
}

// FailedJSON is one element of `ordered failed --json`.
type FailedJSON struct {
	ID          int64           `json:"id"`
	Key         string          `json:"key"`
	Seq         int64           `json:"seq"`
	Kind        string          `json:"kind"`
	Blocking    bool            `json:"blocking"`
	Attempts    int             `json:"attempts"`
	MaxAttempts int             `json:"max_attempts"` // the event's; a worker's --max-attempts may fail it sooner
	Error       string          `json:"error"`
	Payload     json.RawMessage `json:"payload"`
	FinishedAt  time.Time       `json:"finished_at"`
}

func (a *app) failedCmd() *cobra.Command {
	var (
		key    string
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "failed",
		Short: "List failed jobs (blocking ones hold their key until replayed or skipped)",
		Long: `Failed lists failed jobs in key and seq order. Blocking ones hold their key until replayed
or skipped. ATTEMPTS (attempts in --json) counts the job's claims, a crashed worker's among
them; a job fails for good at its event's max_attempts, or sooner at the --max-attempts cap
of the worker that ran it, which is not stored.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 {
				return fmt.Errorf("--limit %d must be at least 1", limit)
			}
			ctx := cmd.Context()
			client, pool, err := a.client(ctx, nil, 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			jobs, err := client.FailedJobs(ctx, ordered.FailedJobsParams{Key: key, Limit: limit})
			if err != nil {
				return err
			}
			if asJSON {
				out := make([]FailedJSON, len(jobs))
				for i, j := range jobs {
					out[i] = FailedJSON{ID: j.ID, Key: j.Key, Seq: j.Seq, Kind: j.Kind, Blocking: j.Blocking,
						Attempts: j.Attempts, MaxAttempts: j.MaxAttempts, Error: j.LastError,
						Payload: j.Payload, FinishedAt: j.FinishedAt.UTC()}
				}
				return writeJSON(a, out)
			}
			if len(jobs) == 0 {
				fmt.Fprintln(a.stdout, "no failed jobs")
				return nil
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tKEY\tSEQ\tKIND\tATTEMPTS\tBLOCKING\tERROR")
			for _, j := range jobs {
				// Attempts alone: the limit that failed the job may be a worker's cap
				// (--max-attempts), which is not stored; max_attempts is the event's own.
				fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%d\t%s\t%s\n", j.ID, cell(j.Key), j.Seq, cell(j.Kind),
					j.Attempts, yesNo(j.Blocking), cell(oneLine(j.LastError)))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "only this key's failed jobs")
	cmd.Flags().IntVar(&limit, "limit", 100, "list at most this many")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// eachJobHelp is the part of the replay and skip help that says how a list of IDs is done.
const eachJobHelp = `Each ID is done on its own, in the order given, in a transaction of its own: the IDs
are independent repairs, so one that is refused (no such job, not failed, ...) undoes none of
the others and stops none of those after it. One line per ID says what was done or why it was
refused, then a summary; the exit status is non-zero if any was refused. An error that is no
refusal (the database unreachable) stops the list where it is.`

func (a *app) replayCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "replay ID...",
		Short: "Queue failed jobs again with fresh attempts",
		Long: `Replay queues failed jobs again with fresh attempts. A job that blocked its key runs
before the key's later jobs. Replaying a job whose later jobs already ran would run it out of
order: that is refused unless --force. A replay is refused too while a later job of the key is
running.

` + eachJobHelp,
		Args: atLeastOne("job ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.eachJob(cmd, args, "replayed", "", func(c *ordered.Client, id int64) (string, bool, error) {
				if err := c.Replay(cmd.Context(), id, ordered.ReplayParams{Force: force}); err != nil {
					return "", false, err
				}
				return fmt.Sprintf("replayed job %d", id), true, nil
			})
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "replay even if later jobs of the key already ran")
	return cmd
}

func (a *app) skipCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "skip ID...",
		Short: "Release keys blocked by failed jobs; the jobs stay failed, for the record",
		Long: `Skip releases the keys blocked by failed jobs: each job stays failed, for the record,
and its key's next job may run. A failed job that blocks nothing (it failed under the skip
policy, or was skipped before) is left as it is, and its line says so.

` + eachJobHelp,
		Args: atLeastOne("job ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.eachJob(cmd, args, "skipped", "blocked nothing", func(c *ordered.Client, id int64) (string, bool, error) {
				released, err := c.Skip(cmd.Context(), id)
				switch {
				case err != nil:
					return "", false, err
				case !released:
					return fmt.Sprintf("job %d blocks nothing: its key had moved on already; left as it is", id), false, nil
				}
				return fmt.Sprintf("skipped job %d: its key moves on to its next job", id), true, nil
			})
		},
	}
}

// refused reports whether err is a refusal of one job (the others may still be done), not a
// failure of the command.
func refused(err error) bool {
	return errors.Is(err, ordered.ErrNotFailed) || errors.Is(err, ordered.ErrReplayOutOfOrder) ||
		errors.Is(err, ordered.ErrLaterJobRunning)
}

// eachJob applies op to every job ID on its own, printing op's line or the refusal of each,
// then a summary; see eachJobHelp. op reports whether it changed the job: one it left as it
// was (a skip of a job that blocks nothing) is no refusal, and is counted as unchanged.
func (a *app) eachJob(cmd *cobra.Command, args []string, verb, unchanged string,
	op func(*ordered.Client, int64) (line string, changed bool, err error)) error {
	ids := make([]int64, len(args))
	for i, s := range args {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			return fmt.Errorf("%q is not a job ID", s)
		}
		ids[i] = id
	}
	client, pool, err := a.client(cmd.Context(), nil, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	var done, kept int
	var refusedIDs []string
	summary := func() string {
		s := fmt.Sprintf("%s %d of %d jobs", verb, done, len(ids))
		if kept > 0 {
			s += fmt.Sprintf("; %d %s", kept, unchanged)
		}
		return s
	}
	for _, id := range ids {
		line, changed, err := op(client, id)
		switch {
		case err == nil && changed:
			done++
			fmt.Fprintln(a.stdout, line)
		case err == nil:
			kept++
			fmt.Fprintln(a.stdout, line)
		case refused(err):
			refusedIDs = append(refusedIDs, strconv.FormatInt(id, 10))
			fmt.Fprintf(a.stdout, "refused: %s\n", strings.TrimPrefix(err.Error(), "ordered: "))
		default:
			return fmt.Errorf("%s, then job %d: %w", summary(), id, err)
		}
	}
	if len(refusedIDs) > 0 {
		return fmt.Errorf("%s; refused: %s", summary(), strings.Join(refusedIDs, ", "))
	}
	fmt.Fprintln(a.stdout, summary())
	return nil
}

func (a *app) archiveCmd() *cobra.Command {
	var (
		olderThan time.Duration
		batch     int
	)
	cmd := &cobra.Command{
		Use:   "archive",
		Short: "Delete finished (done) jobs in bounded batches; failed jobs are kept",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if batch < 1 {
				return fmt.Errorf("--batch %d must be at least 1", batch)
			}
			if olderThan < 0 {
				return fmt.Errorf("--older-than %s must not be negative", olderThan)
			}
			ctx := cmd.Context()
			client, pool, err := a.client(ctx, nil, 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			total, err := client.Archive(ctx, ordered.ArchiveParams{OlderThan: olderThan, Limit: batch, All: true})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "archived %d done jobs\n", total)
			return nil
		},
	}
	cmd.Flags().DurationVar(&olderThan, "older-than", 0, "keep jobs finished more recently than this")
	cmd.Flags().IntVar(&batch, "batch", ordered.ArchiveBatchDefault, "jobs deleted per statement")
	return cmd
}

// writeJSON prints v as indented JSON whose strings hold no character a terminal acts on:
// encoding/json escapes U+0000 to U+001F, U+2028 and U+2029; writeJSON escapes the other
// unprintable characters (DEL, the C1 controls, format characters) too.
func writeJSON(a *app, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	out := buf.Bytes()
	var b bytes.Buffer
	for len(out) > 0 {
		r, n := utf8.DecodeRune(out)
		switch {
		case r == 0x7f || r >= utf8.RuneSelf && !strconv.IsPrint(r):
			for _, u := range utf16.Encode([]rune{r}) { // JSON escapes are UTF-16
				fmt.Fprintf(&b, `\u%04x`, u)
			}
		default:
			b.Write(out[:n])
		}
		out = out[n:]
	}
	_, err := a.stdout.Write(b.Bytes())
	return err
}

// cell is s as a table cell that cannot forge output: s itself when it is printable text, else
// s quoted as a Go string ("a\x1b[2Jb"). A cell that starts with a quote is quoted too, so that
// a quoted cell is never ambiguous.
func cell(s string) string {
	if strings.HasPrefix(s, `"`) || !isPrintable(s) {
		return strconv.Quote(s)
	}
	return s
}

// isPrintable reports whether s is valid UTF-8 of printable characters and spaces only
// (strconv.IsPrint): no control or format character.
func isPrintable(s string) bool {
	return utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) < 0
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
