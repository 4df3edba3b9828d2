package cli

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/orderedq/ordered/ordered"
)

// GapJSON is one element of the keys of `ordered gaps --json`.
type GapJSON struct {
	Key       string     `json:"key"`
	NextSeq   int64      `json:"next_seq"`
	Missing   *RangeJSON `json:"missing"` // null: no seq missing below an open job
	Waiting   bool       `json:"waiting"`
	Since     *time.Time `json:"since"`    // null: not waiting
	Deadline  *time.Time `json:"deadline"` // null: the gap policy never acts
	Blocked   bool       `json:"blocked"`
	GapAction string     `json:"gap_action"`
	OpenJobs  int64      `json:"open_jobs"`
	Running   int64      `json:"running"`
}

// RangeJSON is a range of seqs, from and to inclusive.
type RangeJSON struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// PassedGapJSON is one element of the passed ranges of `ordered gaps --json`.
type PassedGapJSON struct {
	Key      string    `json:"key"`
	From     int64     `json:"from"`
	To       int64     `json:"to"`
	PassedAt time.Time `json:"passed_at"`
	Reason   string    `json:"reason"`
}

// GapsJSON is the stable shape of `ordered gaps --json`.
type GapsJSON struct {
	Keys   []GapJSON       `json:"keys"`
	Passed []PassedGapJSON `json:"passed"`
}

const gapsLong = `Gaps lists the contiguous keys waiting on a gap (a missing seq that holds the key), longest
waiting first, with the range they miss, since when they wait, when their gap policy acts
(proceed past the gap or block the key) and whether it blocked them; then the ranges passed
so far (by timeout or released by hand). With --key, that one contiguous key, waiting or not.
Release a gap with ordered gaps release KEY.`

func (a *app) gapsCmd() *cobra.Command {
	var (
		key    string
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "gaps",
		Short: "List contiguous keys waiting on a gap, and the gaps passed",
		Long:  gapsLong,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			client, pool, err := a.client(ctx, nil, 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			gaps, err := client.Gaps(ctx, ordered.GapsParams{Key: key, Limit: limit})
			if err != nil {
				return err
			}
			passed, err := client.PassedGaps(ctx, key, limit)
			if err != nil {
				return err
			}
			out := GapsJSON{Keys: []GapJSON{}, Passed: []PassedGapJSON{}}
			for _, g := range gaps {
				j := GapJSON{Key: g.Key, NextSeq: g.NextSeq, Waiting: g.Waiting, Blocked: g.Blocked,
					GapAction: g.GapAction, OpenJobs: g.OpenJobs, Running: g.Running}
				if g.Missing != nil {
					j.Missing = &RangeJSON{From: g.Missing.From, To: g.Missing.To}
				}
				if g.Waiting {
					since := g.Since.UTC()
					j.Since = &since
				}
				if !g.Deadline.IsZero() {
					deadline := g.Deadline.UTC()
					j.Deadline = &deadline
				}
				out.Keys = append(out.Keys, j)
			}
			for _, p := range passed {
				out.Passed = append(out.Passed, PassedGapJSON{Key: p.Key, From: p.Range.From, To: p.Range.To,
					PassedAt: p.PassedAt.UTC(), Reason: p.Reason})
			}
			if asJSON {
				return writeJSON(a, out)
			}
			return a.printGaps(out, key != "")
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "only this contiguous key, waiting or not")
	cmd.Flags().IntVar(&limit, "limit", 100, "list at most this many keys and passed ranges")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(a.gapsReleaseCmd())
	return cmd
}

func (a *app) printGaps(out GapsJSON, oneKey bool) error {
	if len(out.Keys) == 0 && !oneKey {
		fmt.Fprintln(a.stdout, "no key waits on a gap")
	} else {
		tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY\tNEXT SEQ\tMISSING\tWAITING\tGAP POLICY\tACTS IN\tOPEN")
		for _, g := range out.Keys {
			missing, waiting, acts := "-", "no", "-"
			if g.Missing != nil {
				missing = seqRange(g.Missing.From, g.Missing.To)
			}
			if g.Since != nil {
				waiting = time.Since(*g.Since).Round(time.Second).String()
				if g.Blocked {
					waiting += " (blocked)"
				}
			}
			if g.Deadline != nil && !g.Blocked {
				acts = max(time.Until(*g.Deadline), 0).Round(time.Second).String()
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d\n", cell(g.Key), g.NextSeq, missing, waiting, g.GapAction, acts, g.OpenJobs)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(out.Passed) == 0 {
		return nil
	}
	fmt.Fprintln(a.stdout)
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PASSED KEY\tSEQS\tPASSED AT\tREASON")
	for _, p := range out.Passed {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", cell(p.Key), seqRange(p.From, p.To), p.PassedAt.Format(time.RFC3339), p.Reason)
	}
	return tw.Flush()
}

func seqRange(from, to int64) string {
	if from == to {
		return fmt.Sprint(from)
	}
	return fmt.Sprintf("%d-%d", from, to)
}

func (a *app) gapsReleaseCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "release KEY...",
		Short: "Pass the lowest missing range of contiguous keys now",
		Long: `Release passes the lowest missing range of each contiguous key now, as its gap policy's
timeout would: the range is recorded, the key's later jobs may run, and an event of the range
that arrives afterwards is late. A key whose job before the gap is running keeps running it,
and moves past the range once it finishes.

Each key is done on its own, in the order given, in a transaction of its own: one that is
refused (no such contiguous key, no missing seq) undoes none of the others. One line per key,
then a summary; the exit status is non-zero if any was refused.`,
		Args: atLeastOne("key"),
		RunE: func(cmd *cobra.Command, keys []string) error {
			client, pool, err := a.client(cmd.Context(), nil, 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			var done int
			var refusedKeys []string
			summary := func() string { return fmt.Sprintf("released %d of %d keys", done, len(keys)) }
			for _, key := range keys {
				r, err := client.ReleaseGap(cmd.Context(), key)
				switch {
				case err == nil:
					done++
					fmt.Fprintf(a.stdout, "released key %s: passed seqs %s\n", cell(key), seqRange(r.From, r.To))
				case errors.Is(err, ordered.ErrNoGap) || errors.Is(err, ordered.ErrNotContiguous):
					refusedKeys = append(refusedKeys, cell(key))
					fmt.Fprintf(a.stdout, "refused: %s\n", strings.TrimPrefix(err.Error(), "ordered: "))
				default:
					return fmt.Errorf("%s, then key %s: %w", summary(), cell(key), err)
				}
			}
			if len(refusedKeys) > 0 {
				return fmt.Errorf("%s; refused: %s", summary(), strings.Join(refusedKeys, ", "))
			}
			fmt.Fprintln(a.stdout, summary())
			return nil
		},
	}
}
