package demo

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// progress draws a progress bar, redrawn in place on a terminal and as lines elsewhere.
type progress struct {
	w        io.Writer
	total    int
	tty      bool
	lastLine time.Time
}

func newProgress(w io.Writer, total int) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progress{w: w, total: total, tty: tty}
}

func (p *progress) line(n int) string {
	const width = 40
	filled := n * width / max(p.total, 1)
	return fmt.Sprintf("[%s%s] %d/%d", strings.Repeat("#", filled), strings.Repeat(".", width-filled), n, p.total)
}

func (p *progress) show(n int) {
	if p.tty {
		fmt.Fprintf(p.w, "\r%s", p.line(n))
		return
	}
	if time.Since(p.lastLine) >= time.Second {
		p.lastLine = time.Now()
		fmt.Fprintln(p.w, p.line(n))
	}
}

func (p *progress) note(s string) {
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintln(p.w, s)
}

func (p *progress) done(n int) {
	if p.tty {
		fmt.Fprintf(p.w, "\r%s\n", p.line(n))
		return
	}
	fmt.Fprintln(p.w, p.line(n))
}
