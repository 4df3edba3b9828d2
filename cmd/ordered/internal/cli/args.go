package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/orderedq/ordered/policy"
)

// noArgs refuses any argument of a command that takes none, naming the first.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%s takes no arguments, got %q", commandName(cmd), args[0])
	}
	return nil
}

// atLeastOne requires one argument or more, each a what.
func atLeastOne(what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return fmt.Errorf("%s needs at least one %s", commandName(cmd), what)
		}
		return nil
	}
}

// commandName is cmd's path below the root: "status", "gaps release".
func commandName(cmd *cobra.Command) string {
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

// policyFlag is the failure policy a --policy flag names.
func policyFlag(name string) (policy.Decision, error) {
	d, err := policy.ParseDecision(name)
	if err != nil {
		return 0, fmt.Errorf("--policy %q is not a failure policy (want block or skip)", name)
	}
	return d, nil
}
