// Command ordered operates an ordered queue from the shell: migrate the schema, enqueue JSON
// Lines, run workers that execute a command per job, inspect and repair failures, archive;
// and the demo, the benchmark suite and the chaos run. The commands live in package cli.
package main

import (
	"context"
	"os"

	"github.com/orderedq/ordered/cmd/ordered/internal/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
