package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/orderedq/ordered/policy"
)

// noArgs refuses any argument of a command that takes none, naming the first; for a command
// with subcommands, it is an unknown subcommand.
func noArgs(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) == 0:
		return nil
	case cmd.HasAvailableSubCommands():
		var names []string
		for _, sub := range cmd.Commands() {
			if sub.IsAvailableCommand() {
				names = append(names, sub.Name())
			}
		}
		return fmt.Errorf("unknown command %q for %s (known: %s)", args[0], commandName(cmd), strings.Join(names, ", "))
	case cmd.Flags().Lookup("exec") != nil:
		return fmt.Errorf("%s takes no arguments, got %q (quote a COMMAND with spaces: --exec 'my-handler --flag')",
			commandName(cmd), args[0])
	}
	return fmt.Errorf("%s takes no arguments, got %q", commandName(cmd), args[0])
}

// atMostOne allows no argument or one, a what.
func atMostOne(what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > 1 {
			return fmt.Errorf("%s reads one %s, got %d arguments", commandName(cmd), what, len(args))
		}
		return nil
	}
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
