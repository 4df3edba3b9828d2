package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/orderedq/ordered/schema"
)

func (a *app) migrateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Apply the schema migrations (idempotent; safe when several run at once)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pool, err := a.pool(cmd.Context(), 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			applied, err := schema.Migrate(cmd.Context(), pool)
			if err != nil {
				return err
			}
			if len(applied.Migrations) == 0 && len(applied.Functions) == 0 {
				fmt.Fprintln(a.stdout, "schema is up to date")
				return nil
			}
			if len(applied.Migrations) > 0 {
				fmt.Fprintf(a.stdout, "applied migrations %v\n", applied.Migrations)
			}
			if len(applied.Functions) > 0 {
				fmt.Fprintf(a.stdout, "applied functions %s\n", strings.Join(applied.Functions, " "))
			}
			return nil
		},
	}
}
