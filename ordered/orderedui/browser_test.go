package orderedui_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// update writes a screenshot of each page into docs/ui.
var update = flag.Bool("update", false, "write the screenshots of the pages into docs/ui")

// The package's tests share one headless browser, started by the first that needs it, each
// test in a tab of its own.
var browser struct {
	once        sync.Once
	ctx         context.Context
	cancelAlloc context.CancelFunc
	err         error
}

// chromiumPath finds Chromium, installing Debian's package when it is missing and we are
// root; the browser tests fail without it.
func chromiumPath() (string, error) {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	if os.Geteuid() != 0 {
		return "", errors.New("no chromium found, and not root to install it (apt-get install chromium)")
	}
	fmt.Fprintln(os.Stderr, "orderedui tests: no chromium found; installing package chromium")
	install := exec.Command("sh", "-c", "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium")
	install.Stdout, install.Stderr = os.Stderr, os.Stderr
	if err := install.Run(); err != nil {
		return "", fmt.Errorf("apt-get install chromium: %w", err)
	}
	return exec.LookPath("chromium")
}

func startBrowser() {
	path, err := chromiumPath()
	if err != nil {
		browser.err = err
		return
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // tests run as root, where Chromium's sandbox refuses to start
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 860),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, _ := chromedp.NewContext(allocCtx)
	if err := chromedp.Do(ctx); err != nil {
		cancelAlloc()
		browser.err = fmt.Errorf("start chromium %s: %w", path, err)
		return
	}
	browser.ctx, browser.cancelAlloc = ctx, cancelAlloc
}

// closeBrowser closes the browser if a test started it.
func closeBrowser() error {
	if browser.ctx == nil {
		return nil
	}
	err := chromedp.Cancel(browser.ctx)
	browser.cancelAlloc()
	return err
}

// tab opens a tab of the shared browser for t, closed when t ends, in a browser context of its
// own: no cookie of another test's login (the servers differ only by port, which cookies do not
// tell apart) reaches it. It fails t when no browser can be had.
func tab(t *testing.T) context.Context {
	t.Helper()
	browser.once.Do(startBrowser)
	if browser.err != nil {
		t.Fatalf("browser: %v", browser.err)
	}
	ctx, cancel := chromedp.NewContext(browser.ctx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	// A bound against a hang, not a timing assumption: every wait is for a DOM condition.
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancelTimeout)
	return ctx
}

// screenshot saves the tab's viewport as docs/ui/name.png when the tests run with -update.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if !*update {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dir := filepath.Join("..", "..", "docs", "ui")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// noDialogs watches the tab for JavaScript dialogs (closing any); the func it returns fails t
// if any page opened one.
func noDialogs(t *testing.T, ctx context.Context) func() {
	var mu sync.Mutex
	var opened []string
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			mu.Lock()
			opened = append(opened, ev.Message)
			mu.Unlock()
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		if len(opened) > 0 {
			t.Errorf("a page ran a script that opened dialogs: %q", opened)
		}
	}
}
