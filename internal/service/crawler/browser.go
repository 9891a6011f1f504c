package crawler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// browserNames are the executables looked up in PATH, Debian's first.
var browserNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// FindBrowser returns the browser to render with: explicit when it is set
// (and executable), else the first of chromium, chromium-browser,
// google-chrome in PATH. It returns "" when there is none.
func FindBrowser(explicit string) string {
	if explicit != "" {
		if p, err := exec.LookPath(explicit); err == nil {
			return p
		}
		return ""
	}
	for _, name := range browserNames {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browserLaunchTimeout bounds the start of Chromium; a cold start on a loaded
// machine takes a few seconds.
const browserLaunchTimeout = 30 * time.Second

// browser is a headless Chromium started on first use and shared by all
// pages, each in its own tab.
type browser struct {
	path      string
	userAgent string
	report    func(Progress)
	net       *egressNet

	once    sync.Once
	ctx     context.Context // the browser's chromedp context
	stop    func()
	dataDir string
	err     error

	// tabs bounds the open tabs: each one is a renderer process, and the
	// sandbox has little memory and few cores.
	tabs chan struct{}
}

func newBrowser(path, userAgent string, maxTabs int, report func(Progress), nw *egressNet) *browser {
	return &browser{path: path, userAgent: userAgent, report: report, net: nw, tabs: make(chan struct{}, maxTabs)}
}

// start launches the browser once; later calls return the first outcome. A
// failure is reported as a browser error line: the crawl goes on over HTTP.
func (b *browser) start() error {
	b.once.Do(func() {
		defer func() {
			if b.err != nil {
				b.report(Progress{Stage: StageBrowser, Status: StatusError, Message: b.err.Error() + ": HTTP mode"})
			}
		}()
		proxy, err := b.net.browserProxy()
		if err != nil {
			b.err = err
			return
		}
		dir, err := os.MkdirTemp("", "sandstep-crawler-chromium-")
		if err != nil {
			b.err = fmt.Errorf("browser profile dir: %w", err)
			return
		}
		b.dataDir = dir
		opts := []chromedp.ExecAllocatorOption{
			chromedp.ExecPath(b.path),
			chromedp.Headless,
			chromedp.NoSandbox,
			chromedp.DisableGPU,
			chromedp.NoFirstRun,
			chromedp.NoDefaultBrowserCheck,
			chromedp.Flag("disable-dev-shm-usage", true),
			chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-sync", true),
			chromedp.Flag("disable-extensions", true),
			chromedp.Flag("disable-default-apps", true),
			chromedp.Flag("disable-breakpad", true),
			chromedp.Flag("metrics-recording-only", true),
			chromedp.UserDataDir(dir),
			chromedp.UserAgent(b.userAgent),
			// Every request of every page goes through the policy proxy,
			// loopback included (Chromium bypasses the proxy for loopback
			// unless told not to), and WebRTC may not go around it.
			chromedp.ProxyServer(proxy),
			chromedp.Flag("proxy-bypass-list", "<-loopback>"),
			chromedp.Flag("force-webrtc-ip-handling-policy", "disable_non_proxied_udp"),
		}
		// The browser lives as long as the allocator context, so that one
		// has no deadline; the launch is bounded by cancelling it.
		allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancelCtx := chromedp.NewContext(allocCtx)
		b.ctx = ctx
		b.stop = func() {
			cancelCtx()
			cancelAlloc() // waits for the process to exit
			_ = os.RemoveAll(dir)
		}
		timer := time.AfterFunc(browserLaunchTimeout, cancelCtx)
		err = chromedp.Do(ctx)
		timer.Stop()
		if err != nil {
			b.stop()
			b.err = fmt.Errorf("launch %s: %w", b.path, err)
		}
	})
	return b.err
}

// close stops the browser if it was started.
func (b *browser) close() {
	if b.ctx != nil && b.err == nil {
		b.stop()
	}
}

// rendered is a page as the browser shows it after its scripts ran.
type rendered struct {
	FinalURL string
	Status   int
	HTML     string
}

// scroll bounds: lazy pages load more as they are scrolled, but a page that
// grows forever must not hold the crawl.
const (
	maxScrollSteps = 10
	maxScrollTime  = 5 * time.Second
	scrollPause    = 150 * time.Millisecond
	// textWait bounds the wait for a page whose text is still missing after
	// the load event (a single-page app fetching its data).
	textWait     = 1500 * time.Millisecond
	textWaitStep = 250 * time.Millisecond
)

// blockedTypes are not needed for text, and are the bulk of a page's bytes.
var blockedTypes = []network.ResourceType{network.ResourceTypeImage, network.ResourceTypeFont, network.ResourceTypeMedia}

// render loads pageURL in a new tab, waits for the load event, scrolls a
// bounded number of times, and returns the document's outerHTML. ctx bounds
// the whole render.
func (b *browser) render(ctx context.Context, pageURL string) (rendered, error) {
	if err := b.start(); err != nil {
		return rendered{}, err
	}
	select {
	case b.tabs <- struct{}{}:
		defer func() { <-b.tabs }()
	case <-ctx.Done():
		return rendered{}, ctx.Err()
	}

	// The tab's context must descend from the browser's, so the caller's
	// deadline and cancellation reach it through AfterFunc: closing the tab
	// ends whatever runs in it.
	tctx, closeTab := chromedp.NewContext(b.ctx)
	defer closeTab()
	defer context.AfterFunc(ctx, closeTab)()
	if err := chromedp.Do(tctx); err != nil { // opens the tab
		return rendered{}, fmt.Errorf("open tab: %w", ctxErr(ctx, err))
	}

	patterns := make([]*fetch.RequestPattern, 0, len(blockedTypes))
	for _, t := range blockedTypes {
		patterns = append(patterns, &fetch.RequestPattern{URLPattern: "*", ResourceType: t})
	}
	paused := chromedp.Events(tctx, fetch.RequestPaused)
	go func() {
		for ev, err := range paused {
			if err != nil {
				return
			}
			// An error here means the tab is closing; the request dies with it.
			_, _ = chromedp.Call(tctx, fetch.FailRequest, fetch.FailRequestParams{RequestID: ev.RequestID, ErrorReason: network.ErrorReasonBlockedByClient})
		}
	}()
	if _, err := chromedp.Call(tctx, fetch.Enable, fetch.EnableParams{Patterns: patterns}); err != nil {
		return rendered{}, fmt.Errorf("block media: %w", err)
	}

	resp, err := chromedp.Run(tctx, chromedp.NavigateResponse(pageURL))
	if err != nil {
		return rendered{}, fmt.Errorf("navigate: %w", ctxErr(ctx, err))
	}
	if resp != nil {
		if d, ok := isDenied(resp.Headers); ok {
			// A script sent the page somewhere the policy refuses.
			return rendered{}, d
		}
	}
	b.settle(tctx)
	loc, err := chromedp.Run(tctx, chromedp.Location())
	if err != nil {
		return rendered{}, fmt.Errorf("location: %w", ctxErr(ctx, err))
	}
	html, err := chromedp.Run(tctx, chromedp.Evaluate[string](`document.documentElement ? document.documentElement.outerHTML : ""`))
	if err != nil {
		return rendered{}, fmt.Errorf("outerHTML: %w", ctxErr(ctx, err))
	}
	r := rendered{FinalURL: loc, HTML: html}
	if resp != nil {
		r.Status = int(resp.Status)
	}
	return r, nil
}

// settle gives the page's scripts a bounded chance to produce text: it waits
// a little for a body that is still empty, then scrolls until the bottom,
// maxScrollSteps or maxScrollTime. Errors end it early; the caller reads
// whatever the page has.
func (b *browser) settle(ctx context.Context) {
	for waited := time.Duration(0); waited < textWait; waited += textWaitStep {
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.body ? document.body.innerText.trim().length : 0`))
		if err != nil || n >= thinText {
			break
		}
		if !sleep(ctx, textWaitStep) {
			return
		}
	}
	deadline := time.Now().Add(maxScrollTime)
	for range maxScrollSteps {
		if time.Now().After(deadline) {
			return
		}
		moved, err := chromedp.Run(ctx, chromedp.Evaluate[bool](
			`(() => { const y = window.scrollY; window.scrollBy(0, window.innerHeight); return window.scrollY > y; })()`))
		if err != nil || !moved {
			return
		}
		if !sleep(ctx, scrollPause) {
			return
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// ctxErr prefers the caller's context error: chromedp reports a cancelled
// tab in its own words, and the crawl decides on timeout versus stop.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	return err
}
