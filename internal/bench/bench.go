// Package bench is `ordered bench`, the benchmark suite. In one run on one machine it measures
// the machine's commit ceiling (single-row UPDATE commits/s), then each scenario in a fresh
// schema: throughput of enqueue and drain with a no-op handler (many keys, few deep keys, one
// key), hot-key flatness, claim latency over a deep backlog, bulk and single enqueue, wake-up
// latency with LISTEN/NOTIFY and polling, and a churn run with archival and autovacuum. Rates
// are reported beside their ratio to the ceiling.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/orderedq/ordered/internal/harness"
)

// Options are the settings of a bench run.
type Options struct {
	// DatabaseURL is the database; empty: the server on 127.0.0.1:5432, else a private
	// cluster.
	DatabaseURL string
	Sizes       Sizes
	// Only lists the scenarios to run (see ScenarioNames); empty: all. The ceiling always runs.
	Only []string
	// JSON prints the figures as JSON instead of a table.
	JSON bool
	// Log takes a line on the database used and, unless JSON, one per figure as it is measured.
	Log io.Writer
}

// ScenarioNames are the scenarios of a run, in order; the ceiling comes first, always.
var ScenarioNames = []string{"throughput", "hotkey", "deep", "enqueue", "wakeup", "churn"}

// figure is one line of the bench table.
type figure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	// Ratio is Value over the commit ceiling measured in the same run, for rates.
	Ratio *float64 `json:"ratio_to_ceiling,omitempty"`
	Note  string   `json:"note,omitempty"`
}

// bench is one run of the suite.
type bench struct {
	Options
	baseURL string
	ceiling float64
	figures []figure
}

// Run runs the suite and prints its figures on out.
func Run(ctx context.Context, o Options, out io.Writer) error {
	b := &bench{Options: o}
	if b.Log == nil {
		b.Log = io.Discard
	}
	scenarios := map[string]func(context.Context) error{
		"throughput": b.benchThroughput, "hotkey": b.benchHotKey, "deep": b.benchDeep,
		"enqueue": b.benchEnqueue, "wakeup": b.benchWakeup, "churn": b.benchChurn,
	}
	for _, name := range o.Only {
		if scenarios[name] == nil {
			return fmt.Errorf("bench: unknown scenario %q (known: %s)", name, strings.Join(ScenarioNames, ", "))
		}
	}
	db, err := harness.OpenDatabase(ctx, o.DatabaseURL, b.Log)
	if err != nil {
		return err
	}
	defer db.Close()
	b.baseURL = db.URL
	if err := b.benchCeiling(ctx); err != nil {
		return err
	}
	for _, name := range ScenarioNames {
		if len(o.Only) > 0 && !slices.Contains(o.Only, name) {
			continue
		}
		if err := scenarios[name](ctx); err != nil {
			return err
		}
	}
	if o.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(b.figures)
	}
	return b.printTable(out)
}

// add records a figure; rate says it is a rate, to compare with the ceiling.
func (b *bench) add(name string, value float64, unit string, rate bool, note string) {
	f := figure{Name: name, Value: value, Unit: unit, Note: note}
	if rate && b.ceiling > 0 {
		r := value / b.ceiling
		f.Ratio = &r
	}
	b.figures = append(b.figures, f)
	if !b.JSON {
		fmt.Fprintf(b.Log, "bench: %s: %.1f %s\n", name, value, unit)
	}
}

// printTable prints the figures as a table.
func (b *bench) printTable(out io.Writer) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tvalue\tunit\tvs ceiling\tnote")
	for _, f := range b.figures {
		ratio := ""
		if f.Ratio != nil {
			ratio = fmt.Sprintf("%.2fx", *f.Ratio)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", f.Name, formatValue(f.Value), f.Unit, ratio, f.Note)
	}
	return tw.Flush()
}

func formatValue(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
