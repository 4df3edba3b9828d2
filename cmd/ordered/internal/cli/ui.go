package cli

import (
	"github.com/spf13/cobra"

	"github.com/orderedq/ordered/ordered/orderedui"
)

func (a *app) uiCmd() *cobra.Command {
	var (
		addr     string
		readOnly bool
	)
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve the web dashboard: overview, blocked keys, failed jobs, a key's timeline, a job",
		Long: `UI serves the queue's web dashboard until interrupted: the overview (counts, the oldest ready
job's age, the done rate and the oldest age over the last hour, blocked keys, running jobs and
expired leases), the blocked keys with replay and skip, the failed jobs filtered and paged
with replay and skip of many at once, a key's timeline and a job's detail. Replays and skips
go through the same fenced calls as ordered replay and ordered skip: a replay that would run
out of order says so and asks for a second confirmation.

It listens on 127.0.0.1 unless --addr says otherwise. Any address beyond the loopback
interface needs credentials from the environment: ORDERED_UI_TOKEN (open the printed URL with
?token=TOKEN once), or ORDERED_UI_USER and ORDERED_UI_PASSWORD (HTTP basic auth); without
them it refuses to start. --read-only hides every action and refuses action requests.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			auth, err := orderedui.AuthFromEnv()
			if err != nil {
				return err
			}
			if err := orderedui.CheckAddr(addr, auth); err != nil {
				return err
			}
			ctx := cmd.Context()
			client, pool, err := a.client(ctx, nil, 4)
			if err != nil {
				return err
			}
			defer pool.Close()
			return orderedui.Serve(ctx, client, &orderedui.ServeConfig{Addr: addr, Auth: auth,
				UI: orderedui.Config{ReadOnly: readOnly}, Out: a.stdout})
		},
	}
	cmd.Flags().StringVar(&addr, "addr", orderedui.AddrDefault, "address to listen on (beyond loopback: credentials required)")
	cmd.Flags().BoolVar(&readOnly, "read-only", false, "hide every action and refuse action requests")
	return cmd
}
