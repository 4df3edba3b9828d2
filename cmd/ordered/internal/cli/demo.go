package cli

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/orderedq/ordered/internal/demo"
	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/orderedui"
)

const demoLong = `Demo enqueues a realistic per-customer event stream (orders, payments, invoices, shipments
for hundreds of customers, with some flaky events and one poison event), runs two worker
processes over it, kills one with SIGKILL midway and starts a replacement, and ends with a
report: events processed, retries, the poisoned customer under the chosen policy, the takeover
after the kill, and a per-key order check over the effects the handlers recorded.

It uses --database-url or DATABASE_URL, else the server on 127.0.0.1:5432, else a private
throwaway PostgreSQL cluster. It works in a schema of its own, dropped at the end.`

func (a *app) demoCmd() *cobra.Command {
	var (
		o          = demo.Options{Stderr: a.stderr}
		short      bool
		eventsFile string
		ui         bool
		uiAddr     string
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the main job: a per-customer event stream through crashing workers, checked for order",
		Long:  demoLong,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := policyFlag(o.Policy); err != nil {
				return err
			}
			if o.Workers < 1 {
				return fmt.Errorf("--workers %d must be at least 1", o.Workers)
			}
			customers := demo.Customers
			if short {
				customers = demo.CustomersShort
			}
			o.Events = demo.Stream(customers)
			if eventsFile != "" {
				events, err := readEventsFile(eventsFile)
				if err != nil {
					return err
				}
				o.Events = events
			}
			o.DatabaseURL = a.url()
			if ui {
				o.Serve = func(ctx context.Context, client *ordered.Client) error {
					return orderedui.Serve(ctx, client, &orderedui.ServeConfig{Addr: uiAddr, Out: a.stdout})
				}
			}
			return demo.Run(cmd.Context(), o, a.stdout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Policy, "policy", "block", "what the poison event does to its customer: block or skip")
	f.IntVar(&o.Workers, "workers", 8, "handlers per worker process")
	f.BoolVar(&short, "short", false, "a smaller stream (for CI)")
	f.BoolVar(&o.Keep, "keep", false, "keep the demo's schema instead of dropping it")
	f.StringVar(&eventsFile, "events", "", "enqueue this JSON Lines file instead of the embedded stream")
	f.BoolVar(&ui, "ui", false, "after the report, serve the dashboard over the demo's queue until interrupted")
	f.StringVar(&uiAddr, "ui-addr", orderedui.AddrDefault, "the dashboard's address, with --ui")
	return cmd
}

// readEventsFile reads the demo's --events file, which must hold events.
func readEventsFile(name string) ([]ordered.Event, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	events, _, err := readEvents(f)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: %w", name, err)
	case len(events) == 0:
		return nil, fmt.Errorf("%s: no events", name)
	}
	return events, nil
}

// demoWorkerCmd is a worker process of the demo (see demo.Worker), which the demo starts and
// kills.
func (a *app) demoWorkerCmd() *cobra.Command {
	var (
		w          demo.Worker
		policyName string
	)
	cmd := &cobra.Command{
		Use:    demo.WorkerCommand,
		Short:  "A worker process of the demo",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if w.Policy, err = policyFlag(policyName); err != nil {
				return err
			}
			return a.runWorker(cmd.Context(), workerSetup{
				client:  w.Config(quietLogger(a.stderr)),
				worker:  w.WorkerConfig(),
				handler: func(*pgxpool.Pool) ordered.Handler { return w.Handler() },
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&a.schema, "schema", "", "the demo's schema")
	f.StringVar(&w.Name, "name", "worker", "name recorded with each effect")
	f.StringVar(&policyName, "policy", "block", "block or skip")
	f.IntVar(&w.Workers, "workers", 8, "handlers")
	f.DurationVar(&w.Lease, "lease", demo.Lease, "lease")
	return cmd
}
