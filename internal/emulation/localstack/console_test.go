package localstack_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"

	"github.com/sandstep/sandstep/internal/emulation/asl"
	"github.com/sandstep/sandstep/internal/testkit/fixturesite"
	"github.com/sandstep/sandstep/internal/testkit/testbin"
)

// consoleArtifacts is where the browser test leaves its screenshots:
// $SANDSTEP_TEST_ARTIFACTS/console when set (a runner that keeps artifacts
// points it at its folder; .ci/run does not set it), else
// .sandstep/test-artifacts/console in the repository (ignored by git).
func consoleArtifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SANDSTEP_TEST_ARTIFACTS")
	if dir == "" {
		root, err := testbin.Root()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, ".sandstep", "test-artifacts")
	}
	dir = filepath.Join(dir, "console")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browser drives one headless Chromium tab against the stack.
type browser struct {
	t    *testing.T
	ctx  context.Context
	dir  string
	mu   sync.Mutex
	errs []string // uncaught exceptions and security (CSP) messages
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	if !testbin.HaveTool(t, "chromium", "chromium") {
		t.Skip("chromium is missing (Debian package chromium)")
	}
	// chromedp's defaults turn off the browser's own traffic (updates,
	// safe browsing, sync): the test talks to 127.0.0.1 only.
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath("chromium"), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 1000), chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("no-pings", true))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx, dir: consoleArtifacts(t)}
	// The first Run starts the browser, with no deadline of its own.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	go func() {
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			if m.IsException() || m.Source == "security" {
				b.mu.Lock()
				b.errs = append(b.errs, m.String())
				b.mu.Unlock()
			}
		}
	}()
	return b
}

// do runs steps with a bound: no wait in this test is unbounded.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 3*time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
		b.t.Fatalf("%s: %v", what, err)
	}
}

func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// signInAt opens the console at url, which may name a page of it by its
// fragment, and signs in there by the form's button; the console then
// shows that page.
func (b *browser) signInAt(url string) {
	b.t.Helper()
	b.do("sign in at "+url,
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#signin-form button[type=submit]")))
}

// until waits, bounded, for a JavaScript condition.
func (b *browser) until(what, cond string, d time.Duration) {
	b.t.Helper()
	b.do(what, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(d))(ctx, t)
		return err
	}))
}

// shot saves a full-page screenshot (PNG) under the artifacts folder.
func (b *browser) shot(name string) {
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(b.dir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
	}
	b.t.Logf("screenshot: %s", p)
}

// a11yCheck finds, in what is on screen: text whose contrast with its
// background is below WCAG AA (4.5:1, 3:1 for large text; disabled
// controls are exempt, as WCAG has them), and controls a keyboard cannot
// reach or that have no name for a screen reader.
const a11yCheck = `(() => {
  const rgba = s => { const m = /rgba?\(([^)]+)\)/.exec(s); if (!m) return null; const p = m[1].split(',').map(parseFloat); return {c: p.slice(0, 3), a: p.length > 3 ? p[3] : 1}; };
  const lum = c => { const [r, g, b] = c.map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); }); return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  const bgOf = el => { for (let e = el; e; e = e.parentElement) { const c = rgba(getComputedStyle(e).backgroundColor); if (c && c.a > 0) return c.c; } return [255, 255, 255]; };
  const shown = el => { const r = el.getBoundingClientRect(); const st = getComputedStyle(el); return r.width > 1 && r.height > 1 && st.visibility !== 'hidden' && !el.closest('[hidden], .sr-only'); };
  const name = el => el.id ? el.tagName.toLowerCase() + '#' + el.id : el.tagName.toLowerCase() + '.' + el.className;
  const bad = [];
  const seen = new Set();
  const w = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n; (n = w.nextNode());) {
    const el = n.parentElement;
    if (!n.textContent.trim() || seen.has(el) || !shown(el) || el.closest(':disabled')) continue;
    seen.add(el);
    const st = getComputedStyle(el);
    const a = lum(rgba(st.color).c), b = lum(bgOf(el));
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    const size = parseFloat(st.fontSize), large = size >= 24 || (parseInt(st.fontWeight) >= 700 && size >= 18.66);
    if (ratio < (large ? 3 : 4.5)) bad.push('contrast ' + ratio.toFixed(2) + ': ' + name(el) + ' "' + n.textContent.trim().slice(0, 40) + '"');
  }
  for (const el of document.querySelectorAll('a[href], button, input, select, textarea, summary')) {
    if (!shown(el) || el.disabled) continue;
    if (el.tabIndex < 0) bad.push('not reachable by Tab: ' + name(el));
    const label = (el.labels && [...el.labels].map(l => l.textContent).join(' ')) || el.getAttribute('aria-label') || el.textContent;
    if (!label || !label.trim()) bad.push('no accessible name: ' + name(el));
  }
  return bad;
})()`

// accessible checks the page as it is now with a11yCheck.
func (b *browser) accessible(where string) {
	b.t.Helper()
	for _, p := range eval[[]string](b, a11yCheck) {
		b.t.Errorf("%s: %s", where, p)
	}
}

// gate holds the first call of a phase until it is opened (or 2 minutes
// pass, so that a failed test does not hang).
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate(t *testing.T) *gate {
	g := &gate{ch: make(chan struct{})}
	t.Cleanup(g.open)
	return g
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

func (g *gate) hold(inv asl.Invoker, fn string) asl.Invoker {
	return &phaseWrapper{inner: inv, fn: fn, before: func(ctx context.Context, n int) error {
		if n != 1 {
			return nil
		}
		select {
		case <-g.ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Minute):
		}
		return nil
	}}
}

const allSteps = `document.querySelectorAll('#steps li').length === 8`

func stepsAre(state string) string {
	return allSteps + ` && [...document.querySelectorAll('#steps li')].every(li => li.dataset.status === '` + state + `')`
}

// TestConsoleInABrowser drives the web console in headless Chromium
// against the whole local stack and the fixture web on 127.0.0.1: sign in,
// submit a job and watch its eight steps go from pending to complete over
// the event stream with the crawl bar reaching its total, read the report
// and follow a citation to its source, then cancel a second job in the
// middle of its crawl. Screenshots of the job page are left in
// consoleArtifacts.
func TestConsoleInABrowser(t *testing.T) {
	b := newBrowser(t)
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 2, SlowLatency: 5 * time.Minute})
	alpha, beta := site.Hosts[0], site.Hosts[1]
	fast := []string{alpha.Page("/a"), alpha.Page("/b"), beta.Page(fixturesite.PathStudy)}
	// Pages that answer only after the crawler's page timeout keep the
	// second job's crawl going until it is cancelled.
	slow := []string{alpha.Page(fixturesite.PathSlow + "?n=1"), beta.Page(fixturesite.PathSlow + "?n=2")}

	// The first job waits before its discovery until the browser has seen
	// every step pending, and before its report until the console has
	// reconnected its event stream, which the server ends every 2 s.
	discover, report := newGate(t), newGate(t)
	var (
		mu          sync.Mutex
		lastEventID []string // of the first job's stream requests
	)
	s := newStackWith(t, stackOpts{allowPrivate: site.AllowPrivate(), config: "[research]\nrender = \"never\"\n",
		server: "stream_max_duration = \"2s\"\nstream_heartbeat = \"1s\"",
		seen: func(r *http.Request) {
			if r.URL.Path == "/v1/jobs/console-1/events" && r.Header.Get("Accept") == "text/event-stream" {
				mu.Lock()
				lastEventID = append(lastEventID, r.Header.Get("Last-Event-ID"))
				mu.Unlock()
			}
		},
		wrap: func(inv asl.Invoker) asl.Invoker {
			return discover.hold(report.hold(inv, "ReportFunction"), "DiscoverFunction")
		}})
	reconnected := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range lastEventID {
			if id != "" {
				return true
			}
		}
		return false
	}

	// Sign in, with the keyboard only: Tab from the top of the page past
	// the skip link to the token, type it, Enter. The token goes to
	// sessionStorage, nowhere else.
	b.do("open the console",
		chromedp.Navigate(s.srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#token")))
	b.accessible("the sign-in page")
	for i := 0; i < 5 && eval[string](b, `document.activeElement ? document.activeElement.id : ''`) != "token"; i++ {
		b.do("press Tab", chromedp.KeyEvent("\t"))
		if eval[string](b, `getComputedStyle(document.activeElement).outlineStyle`) == "none" {
			t.Errorf("the focused %s shows no focus ring", eval[string](b, `document.activeElement.outerHTML.slice(0, 80)`))
		}
	}
	if id := eval[string](b, `document.activeElement ? document.activeElement.id : ''`); id != "token" {
		t.Errorf("five Tabs from the top did not reach the token field (the focus is on %q)", id)
	}
	b.do("sign in",
		chromedp.SendKeys(chromedp.CSS("#token"), token+"\r"),
		chromedp.WaitVisible(chromedp.CSS("#submit-form")))
	b.accessible("the jobs page")
	if got := eval[string](b, `sessionStorage.getItem('sandstep.token')`); got != token {
		t.Fatalf("sessionStorage token = %q", got)
	}
	if eval[bool](b, `location.href.includes(sessionStorage.getItem('sandstep.token')) || localStorage.length > 0`) {
		t.Fatal("the token is in the URL or in localStorage")
	}
	// Every control has a label.
	if unlabeled := eval[[]string](b, `[...document.querySelectorAll('input,select,textarea')].filter(e => !e.labels || !e.labels.length).map(e => e.id)`); len(unlabeled) > 0 {
		t.Errorf("controls without a label: %v", unlabeled)
	}

	// Submit the first job against the fixture web.
	b.do("submit the first job",
		chromedp.SendKeys(chromedp.CSS("#query"), "kestrel nest survey on the northern ridge"),
		chromedp.SendKeys(chromedp.CSS("#job-id"), "console-1"),
		chromedp.SendKeys(chromedp.CSS("#seeds"), strings.Join(fast, "\n")),
		chromedp.Click(chromedp.CSS("#submit-form button[type=submit]")))
	b.until("the job page with every step pending", `location.hash === '#/jobs/console-1' && `+stepsAre("pending"), time.Minute)
	b.shot("job-1-pending")
	discover.open()
	b.until("the crawl complete", `document.querySelector('#steps li[data-step=crawl]').dataset.status === 'complete'`, 3*time.Minute)
	for deadline := time.Now().Add(time.Minute); !reconnected(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the console never reconnected with Last-Event-ID: %q", lastEventID)
		}
	}
	report.open()
	b.until("every step complete", stepsAre("complete"), 3*time.Minute)
	b.until("the job succeeded", `document.querySelector('#job-status .badge').textContent === 'succeeded'`, time.Minute)

	// The crawl bar reached its total, which is the API's.
	_, job := s.do(t, "GET", "/v1/jobs/console-1", nil)
	var total int
	for _, st := range job["steps"].([]any) {
		if st := st.(map[string]any); st["id"] == "crawl" {
			total = int(st["total"].(float64))
		}
	}
	if total == 0 {
		t.Fatalf("the crawl step has no total: %v", job)
	}
	bar := eval[map[string]float64](b, `({value: document.querySelector('#crawl-bar').value, max: document.querySelector('#crawl-bar').max})`)
	if bar["max"] != float64(total) || bar["value"] != bar["max"] {
		t.Errorf("crawl bar %v, want %d of %d", bar, total, total)
	}
	if txt := eval[string](b, `document.querySelector('#crawl-text').textContent`); txt != fmt.Sprintf("%d of %d pages crawled", total, total) {
		t.Errorf("crawl text %q", txt)
	}

	// Across reconnections the console saw every event once.
	if got, want := eval[int](b, `document.querySelectorAll('#event-log li:not(.warn)').length`), len(s.events(t, "console-1")); got != want {
		t.Errorf("the event log shows %d events; the job has %d", got, want)
	}

	// The report: rendered Markdown whose citations jump to the source list.
	b.until("the report", `document.querySelectorAll('#report-body a.cite').length > 0 && document.querySelectorAll('#source-list li').length > 0`, time.Minute)
	b.shot("job-1-complete")
	b.accessible("the job page with its report")
	rep := s.reportJSON(t, "console-1")
	n := eval[int](b, `Number(document.querySelector('#report-body a.cite').dataset.n)`)
	var srcURL string
	for _, s := range rep.Sources {
		if s.N == n {
			srcURL = s.URL
		}
	}
	if srcURL == "" {
		t.Fatalf("the first citation names source %d, which the report does not list", n)
	}
	b.do("click a citation",
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#report-body a.cite').scrollIntoView()`),
		chromedp.Click(chromedp.CSS("#report-body a.cite")))
	b.until("the cited source focused in the list", fmt.Sprintf(`document.activeElement && document.activeElement.id === 'src-%d' && document.activeElement.classList.contains('hit')`, n), 10*time.Second)
	if href := eval[string](b, fmt.Sprintf(`document.querySelector('#src-%d a.source-link').href`, n)); href != srcURL {
		t.Errorf("source %d links to %q, want %q", n, href, srcURL)
	}
	if still := eval[string](b, `location.hash`); still != "#/jobs/console-1" {
		t.Errorf("a citation click navigated to %q", still)
	}
	// With the keyboard too: Enter on the last citation moves the focus to
	// its source.
	last := eval[int](b, `(() => { const c = [...document.querySelectorAll('#report-body a.cite')].pop(); c.focus(); return Number(c.dataset.n); })()`)
	b.do("press Enter on a citation", chromedp.KeyEvent("\r"))
	b.until("the focus on its source", fmt.Sprintf(`document.activeElement && document.activeElement.id === 'src-%d'`, last), 10*time.Second)
	b.shot("job-1-citation")
	// The source's link opens the source page, in a new tab.
	opened := chromedp.WaitNewTarget(b.ctx, func(info *target.Info) bool { return info.URL == srcURL })
	b.do("open the source", chromedp.Click(chromedp.CSS(fmt.Sprintf("#src-%d a.source-link", n))))
	select {
	case id, ok := <-opened:
		if !ok || id == "" {
			t.Errorf("no tab opened on %s", srcURL)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("no tab opened on %s within 30 s", srcURL)
	}

	// On a phone's width the page still fits: nothing scrolls sideways.
	b.do("phone width", chromedp.EmulateViewport(390, 844))
	if eval[bool](b, `document.documentElement.scrollWidth > window.innerWidth + 1`) {
		t.Errorf("the job page scrolls sideways at 390 px: %v px wide", eval[float64](b, `document.documentElement.scrollWidth`))
	}
	b.shot("job-1-phone")
	b.accessible("the job page at a phone's width")
	b.do("desktop width", chromedp.EmulateViewport(1280, 1000))

	// A second job, cancelled while it crawls.
	b.do("submit the second job",
		chromedp.Navigate(s.srv.URL+"/#/"),
		chromedp.WaitVisible(chromedp.CSS("#submit-form")),
		chromedp.SendKeys(chromedp.CSS("#query"), "kestrel migration fixtures"),
		chromedp.SendKeys(chromedp.CSS("#job-id"), "console-2"),
		chromedp.SendKeys(chromedp.CSS("#seeds"), strings.Join(append(fast, slow...), "\n")),
		chromedp.Click(chromedp.CSS("#submit-form button[type=submit]")))
	b.until("the second job crawling", `location.hash === '#/jobs/console-2' && `+allSteps+
		` && document.querySelector('#steps li[data-step=crawl]').dataset.status === 'running' && document.querySelector('#crawl-bar').value >= 1`, 2*time.Minute)
	b.shot("job-2-crawling")
	b.do("cancel", chromedp.Click(chromedp.CSS("#cancel")))
	b.until("the second job cancelled", `document.querySelector('#job-status .badge').textContent === 'cancelled'`, 2*time.Minute)
	b.shot("job-2-cancelled")
	b.accessible("a cancelled job's page")
	if job := s.wait(t, "console-2"); job["status"] != "cancelled" {
		t.Errorf("the API says %v", job["status"])
	}
	if code, _ := s.do(t, "GET", "/v1/jobs/console-1", nil); code != http.StatusOK {
		t.Errorf("job 1: %d", code)
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errs {
		t.Errorf("browser: %s", e)
	}
	s.noLiveSandboxes(t, "console-2")
}

// The console's Sessions page runs code in a session, in the language
// picked, shows the output (also of a run that outlasts the server's sync
// wait, which it polls), the session's expiry, and deletes it.
func TestConsoleSessionsInABrowser(t *testing.T) {
	b := newBrowser(t)
	s := newStackWith(t, stackOpts{allowPrivate: []string{"127.0.0.1:1"}, config: "[sessions]\nenabled = true\nsync_wait = \"1s\"\n"})
	b.signInAt(s.srv.URL + "/#/sessions")
	b.do("open Sessions", chromedp.WaitVisible(chromedp.CSS("#run-form")))
	if unlabeled := eval[[]string](b, `[...document.querySelectorAll('input,select,textarea')].filter(e => !e.labels || !e.labels.length).map(e => e.id)`); len(unlabeled) > 0 {
		t.Errorf("controls without a label: %v", unlabeled)
	}
	b.do("run python",
		chromedp.SetValue(chromedp.CSS("#sid"), "console-s1"),
		chromedp.SetValue(chromedp.CSS("#language"), "python"),
		chromedp.SendKeys(chromedp.CSS("#code"), "print(6 * 7)\n"),
		chromedp.Click(chromedp.CSS("#run-form button[type=submit]")))
	b.until("its output", `document.querySelector('#output').textContent.includes('status: succeeded') && document.querySelector('#output').textContent.includes('42')`, 2*time.Minute)
	b.until("the session's expiry", `[...document.querySelectorAll('#session-info dt')].some(dt => dt.textContent === 'Expires' && dt.nextElementSibling.textContent !== '—')`, 30*time.Second)
	b.shot("session-python")
	b.accessible("the sessions page")
	// The list names the session, legibly: dark on light.
	b.until("the session listed", `[...document.querySelectorAll('#session-list button')].some(x => x.textContent === 'console-s1')`, 30*time.Second)
	if c := eval[string](b, `getComputedStyle(document.querySelector('#session-list button')).color`); c == "rgb(255, 255, 255)" {
		t.Errorf("the session list's buttons are white on white")
	}
	// A run past the sync wait answers 202; the page polls it to its end.
	b.do("run shell past the sync wait",
		chromedp.SetValue(chromedp.CSS("#language"), "shell"),
		chromedp.SetValue(chromedp.CSS("#code"), "sleep 2; echo late >&2; echo done"),
		chromedp.Click(chromedp.CSS("#run-form button[type=submit]")))
	b.until("the long run's output", `document.querySelector('#output').textContent.includes('--- stdout\ndone') && document.querySelector('#output').textContent.includes('--- stderr\nlate')`, 2*time.Minute)
	b.shot("session-shell")
	b.do("phone width", chromedp.EmulateViewport(390, 844))
	if eval[bool](b, `document.documentElement.scrollWidth > window.innerWidth + 1`) {
		t.Errorf("the sessions page scrolls sideways at 390 px: %v px wide", eval[float64](b, `document.documentElement.scrollWidth`))
	}
	b.accessible("the sessions page at a phone's width")
	b.shot("session-phone")
	b.do("desktop width", chromedp.EmulateViewport(1280, 1000))
	b.do("delete", chromedp.Click(chromedp.CSS("#run-form button.danger")))
	b.until("the session deleted", `[...document.querySelectorAll('#session-info dd')].some(dd => dd.textContent === 'deleted' || dd.textContent === 'deleting')`, time.Minute)
	_, ss := s.do(t, "GET", "/v1/sessions?limit=10", nil)
	if list, _ := ss["sessions"].([]any); len(list) != 1 {
		t.Errorf("sessions: %v", ss)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errs {
		t.Errorf("browser: %s", e)
	}
}

// Where the server does not stream (the ApiFunction behind API Gateway
// answers every request whole, and so JSON to an event-stream Accept), the
// console reads the job's events page by page instead, and misses none.
func TestConsolePollsWhereTheServerDoesNotStream(t *testing.T) {
	b := newBrowser(t)
	var (
		mu      sync.Mutex
		streams int
	)
	s := newStackWith(t, stackOpts{allowPrivate: []string{"127.0.0.1:1"}, seen: func(r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/events") && r.Header.Get("Accept") == "text/event-stream" {
			mu.Lock()
			streams++
			mu.Unlock()
			// As a host that buffers: the handler is asked for JSON.
			r.Header.Set("Accept", "application/json")
		}
	}})
	s.submit(t, "console-poll")
	b.signInAt(s.srv.URL + "/#/jobs/console-poll")
	b.until("every step complete", stepsAre("complete")+` && document.querySelector('#job-status .badge').textContent === 'succeeded'`, 3*time.Minute)
	want := len(s.events(t, "console-poll"))
	b.until("every event shown once", fmt.Sprintf(`document.querySelectorAll('#event-log li:not(.warn)').length === %d`, want), time.Minute)
	b.shot("job-polled")
	mu.Lock()
	defer mu.Unlock()
	if streams != 1 {
		t.Errorf("%d stream requests; the console should ask once and then poll", streams)
	}
}
