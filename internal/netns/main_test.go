package netns_test

import (
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// dialEnv makes the test binary a child that dials the address it holds (with the timeout in
// dialTimeoutEnv), reads until the end and prints "ok <local address> <milliseconds>" or
// "error <message>".
const (
	dialEnv        = "NETNS_TEST_DIAL"
	dialTimeoutEnv = "NETNS_TEST_DIAL_TIMEOUT"
)

func TestMain(m *testing.M) {
	if addr := os.Getenv(dialEnv); addr != "" {
		timeout, _ := time.ParseDuration(os.Getenv(dialTimeoutEnv))
		start := time.Now()
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(0)
		}
		if _, err := io.Copy(io.Discard, c); err != nil {
			fmt.Println("error", err)
			os.Exit(0)
		}
		fmt.Println("ok", c.LocalAddr(), time.Since(start).Milliseconds())
		c.Close()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}
