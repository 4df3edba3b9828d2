package ordered_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The process tests re-execute this test binary as a worker process.
	if os.Getenv(workerProcessEnv) != "" {
		os.Exit(workerProcessMain())
	}
	goleak.VerifyTestMain(m)
}
