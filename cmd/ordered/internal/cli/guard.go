package cli

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/orderedq/ordered/internal/execguard"
)

// execGuardCmd is the guard that the worker starts for each job (see execHandler and package
// execguard): it exits with its command's exit status, or 128+N if a signal N ended it. Its
// life is its worker's: SIGINT and SIGTERM, which reach it too when every process of the
// worker is signalled (pkill, killall, a service manager's stop), are caught and change
// nothing, so that the worker's drain lets the command finish; the worker ends the command
// through the control pipe.
func (a *app) execGuardCmd() *cobra.Command {
	var grace time.Duration
	cmd := &cobra.Command{
		Use:    execguard.Name + " --grace DURATION -- COMMAND",
		Short:  "Supervise one job's --exec command (started by ordered work)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			code, err := execguard.Supervise(context.WithoutCancel(cmd.Context()), args[0], grace)
			if err != nil {
				return err
			}
			return exitCode(code)
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", killGraceDefault, "time between SIGTERM and SIGKILL")
	return cmd
}
