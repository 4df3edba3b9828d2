package harness

import (
	"io"
	"os"
	"os/exec"
	"syscall"
)

// SpawnSelf starts this binary with args as a child that dies with this process.
func SpawnSelf(stdout, stderr io.Writer, args ...string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return cmd, nil
}

// Child is a started child process whose exit is waited for in the background.
type Child struct {
	*exec.Cmd
	exited chan struct{}
	err    error // how it exited (Wait's error), once exited is closed
}

// Watch waits for cmd's exit in the background; cmd must not be waited for elsewhere.
func Watch(cmd *exec.Cmd) *Child {
	p := &Child{Cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p
}

// Exited is closed once the process has exited.
func (p *Child) Exited() <-chan struct{} { return p.exited }

// HasExited reports whether the process has exited and, if so, how: "exit status N", or the
// signal that ended it.
func (p *Child) HasExited() (how string, exited bool) {
	select {
	case <-p.exited:
		if p.err == nil {
			return "exit status 0", true
		}
		return p.err.Error(), true
	default:
		return "", false
	}
}
