package demo

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == WorkerCommand {
		// A worker process of a demo these tests run: this binary has no worker, so it fails
		// at once, as a worker that cannot start does.
		fmt.Fprintln(os.Stderr, "demo test worker: no worker in a test binary")
		os.Exit(3)
	}
	goleak.VerifyTestMain(m)
}
