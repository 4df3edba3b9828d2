package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/orderedq/ordered/schema"
)

func (a *app) migrateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Apply the schema migrations (idempotent; safe when several run at once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pool, err := a.pool(cmd.Context(), 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			versions, err := schema.Migrate(cmd.Context(), pool)
			if err != nil {
				return err
			}
			if len(versions) == 0 {
				fmt.Fprintln(a.stdout, "schema is up to date")
				return nil
			}
			fmt.Fprintf(a.stdout, "applied migrations %v\n", versions)
			return nil
		},
	}
}
