package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/ddblocal"
	"github.com/sandstep/sandstep/internal/providerhost"
	"github.com/sandstep/sandstep/internal/store"
	"github.com/sandstep/sandstep/internal/testbin"
	"github.com/sandstep/sandstep/providers"
)

// The binaries every test runs: the CLI with the fault hook, the provider
// plugins and the crawler, built once by TestMain.
var bins struct {
	cli, plugins, tools string
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sandstep-soak-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// The sandboxes' own uids must be able to enter the tools folder.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cli, err := testbin.BuildTags(filepath.Join(dir, "cli"), "sandstep_faults", testbin.CLI)
	if err == nil {
		bins.plugins, err = testbin.Build(filepath.Join(dir, "plugins"), testbin.LocalPlugin, testbin.SandyPlugin)
	}
	if err == nil {
		bins.tools, err = testbin.Build(filepath.Join(dir, "tools"), testbin.Crawler)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	bins.cli = filepath.Join(cli, testbin.CLI)
	return ddblocal.RunTests(m)
}

// need fails the test (under CI) or skips it when a tool is missing.
func need(t testing.TB, tool, why string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing: %s (make deps installs it)", tool, why)
		}
		t.Skipf("%s is missing: %s", tool, why)
	}
}

const (
	devToken = "soak-dev-token"
	sandyKey = "soak-sandy-key"
)

// setup is what a test chooses of the server's configuration.
type setup struct {
	provider string // "local" (default) or "sandy"
	sandyURL string
	agent    string // the summarizing agent's command; "" = no agent
	llm      string // an OpenAI-compatible base URL; "" = extractive report
	sessions bool
}

// configText is the one place that writes the servers' configuration: a
// line the sandboxes need to reach the fixture web on 127.0.0.1 (such as
// [sandbox] allow_private) goes here.
func (w *world) configText(s setup) string {
	if s.provider == "" {
		s.provider = "local"
	}
	if s.sandyURL == "" {
		s.sandyURL = "http://127.0.0.1:1"
	}
	text := fmt.Sprintf(`
[server]
data_dir = %q
[provider]
name = %q
plugin_dir = %q
[provider.local]
tools_dir = %q
[provider.sandy]
base_url = %q
api_key_env = "SANDSTEP_TEST_SANDY_KEY"
retry_base_delay = "10ms"
[sandbox]
lifetime = "10m"
[research]
render = "never"
[research.search]
backends = ["searxng"]
searxng_url = %q
`, w.dir, s.provider, bins.plugins, bins.tools, s.sandyURL, w.search.URL)
	if s.agent != "" {
		text += fmt.Sprintf("[research.agent]\nenabled = true\nmodel = \"m\"\ncommand = %q\ntimeout = \"2m\"\n", s.agent)
	}
	if s.llm != "" {
		text += fmt.Sprintf("[research.llm]\nbase_url = %q\napi_key_env = \"\"\nmodels = [\"fixture-model\"]\ntimeout = \"2m\"\n", s.llm)
	}
	if s.sessions {
		text += "[sessions]\nenabled = true\nsync_wait = \"1s\"\nreaper_interval = \"1h\"\n"
	}
	return text
}

// world is a data dir and everything around the server that outlives its
// restarts: the fake search engine, the fault controller, the fixture web.
type world struct {
	t      testing.TB
	dir    string
	addr   string
	logs   string // the servers' stderr, one file per start
	search *searx
	faults *controller
	cfg    string // config file

	mu     sync.Mutex
	srv    *server
	starts int
	// orphans counts processes that outlived their server.
	orphans int
}

func newWorld(t testing.TB) *world {
	t.Helper()
	need(t, "bwrap", "the local provider and the fake Sandy run sandboxes with bubblewrap")
	need(t, "java", "DynamoDB Local runs on Java 17")
	base := t.TempDir()
	os.Chmod(base, 0o755)
	w := &world{t: t, dir: filepath.Join(base, "data"), logs: filepath.Join(base, "logs"), cfg: filepath.Join(base, "config.toml")}
	for _, d := range []string{w.dir, w.logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.addr = ln.Addr().String()
	ln.Close()
	w.search = newSearx(t)
	w.faults = newController(t)
	t.Cleanup(w.close)
	return w
}

// configure writes the configuration the next start uses.
func (w *world) configure(s setup) {
	w.t.Helper()
	if err := os.WriteFile(w.cfg, []byte(w.configText(s)), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

// server is one `sandstep serve` process.
type server struct {
	cmd      *exec.Cmd
	pid      int
	endpoint string // its DynamoDB Local
	prefix   string
	done     chan struct{}
	log      string
}

// start runs the server on the world's data and waits until it serves.
func (w *world) start() *server {
	w.t.Helper()
	w.mu.Lock()
	w.starts++
	n := w.starts
	w.mu.Unlock()
	logPath := filepath.Join(w.logs, fmt.Sprintf("serve-%d.log", n))
	logFile, err := os.Create(logPath)
	if err != nil {
		w.t.Fatal(err)
	}
	root, _ := testbin.Root()
	cmd := exec.Command(bins.cli, "serve", "--config", w.cfg, "--addr", w.addr)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + w.dir,
		"SANDSTEP_DEV_TOKEN=" + devToken,
		"SANDSTEP_TEMPLATE=" + filepath.Join(root, "template.yaml"),
		"SANDSTEP_FAULTS_URL=" + w.faults.URL,
		"SANDSTEP_TEST_SANDY_KEY=" + sandyKey,
		"SANDSTEP_AGENT_TOKEN=agent-token",
		// Providers that cannot mount the crawler get it uploaded.
		"SANDSTEP_CRAWLER=" + filepath.Join(bins.tools, testbin.Crawler),
	}
	endpoint := make(chan [2]string, 1)
	cmd.Stderr = &logScanner{w: logFile, onLine: func(line []byte) {
		var l struct {
			Msg      string `json:"msg"`
			Endpoint string `json:"endpoint"`
			Prefix   string `json:"table_prefix"`
		}
		if json.Unmarshal(line, &l) == nil && l.Msg == "DynamoDB Local started" {
			select {
			case endpoint <- [2]string{l.Endpoint, l.Prefix}:
			default:
			}
		}
	}}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		w.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	s := &server{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{}), log: logPath}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		said := false
		for sc.Scan() {
			if !said && strings.HasPrefix(sc.Text(), "sandstep is serving on") {
				said = true
				ready <- true
			}
		}
		if !said {
			ready <- false
		}
	}()
	go func() {
		cmd.Wait()
		logFile.Close()
		close(s.done)
	}()
	select {
	case ok := <-ready:
		if !ok {
			<-s.done
			w.t.Fatalf("sandstep serve exited before serving (%v); its log:\n%s", cmd.ProcessState, tail(logPath))
		}
	case <-time.After(3 * time.Minute):
		cmd.Process.Kill()
		w.t.Fatalf("sandstep serve did not serve within 3 minutes; its log:\n%s", tail(logPath))
	}
	select {
	case e := <-endpoint:
		s.endpoint, s.prefix = e[0], e[1]
	default:
		w.t.Fatalf("the server did not log its DynamoDB Local; its log:\n%s", tail(logPath))
	}
	w.mu.Lock()
	w.srv = s
	w.mu.Unlock()
	return s
}

// kill sends SIGKILL to the server and waits until it and every process it
// started (plugin, DynamoDB Local) are gone: they must die with it.
func (w *world) kill() {
	w.t.Helper()
	w.mu.Lock()
	s := w.srv
	w.srv = nil
	w.mu.Unlock()
	if s == nil {
		return
	}
	children := childrenOf(s.pid)
	if err := syscall.Kill(s.pid, syscall.SIGKILL); err != nil {
		w.t.Fatal(err)
	}
	<-s.done
	for _, c := range children {
		if !awaitExit(c.pid, 20*time.Second) {
			syscall.Kill(c.pid, syscall.SIGKILL)
			w.orphans++
			w.t.Errorf("%s (pid %d) outlived its server %d", c.comm, c.pid, s.pid)
		}
	}
	w.noOrphanPlugins()
}

// stop ends the server as an operator would (SIGTERM).
func (w *world) stop() {
	w.mu.Lock()
	s := w.srv
	w.srv = nil
	w.mu.Unlock()
	if s == nil {
		return
	}
	syscall.Kill(s.pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(3 * time.Minute):
		syscall.Kill(s.pid, syscall.SIGKILL)
		<-s.done
		w.t.Errorf("the server did not stop within 3 minutes of SIGTERM")
	}
}

func (w *world) close() {
	w.stop()
	if w.t.Failed() {
		// The data and the servers' logs go with the test's temporary
		// folder: keep the logs for whoever replays the failure.
		keep, err := os.MkdirTemp("", "sandstep-soak-logs-")
		if err == nil {
			err = os.CopyFS(keep, os.DirFS(w.logs))
		}
		if err == nil {
			w.t.Logf("the servers' logs are kept in %s", keep)
		}
	}
}

func (w *world) server() *server {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.srv
}

// proc is a process seen in /proc.
type proc struct {
	pid, ppid int
	comm      string
}

func procs() []proc {
	entries, _ := os.ReadDir("/proc")
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		open, close := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if open < 0 || close < open {
			continue
		}
		f := strings.Fields(string(b[close+1:]))
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		out = append(out, proc{pid: pid, ppid: ppid, comm: string(b[open+1 : close])})
	}
	return out
}

func childrenOf(pid int) []proc {
	var out []proc
	for _, p := range procs() {
		if p.ppid == pid {
			out = append(out, p)
		}
	}
	return out
}

// pluginComm is what /proc shows of a plugin's name (15 characters).
const pluginComm = "sandstep-provid"

// noOrphanPlugins fails the test if a provider plugin of this test's build
// runs with no live host: reparented to init (or a subreaper) rather than
// to a sandstep server or a sandbox.
func (w *world) noOrphanPlugins() {
	w.t.Helper()
	for _, p := range procs() {
		if !strings.HasPrefix(p.comm, pluginComm) {
			continue
		}
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.pid))
		if !strings.HasPrefix(exe, bins.plugins) {
			continue // another test's, or a sandbox agent
		}
		parent := ""
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.ppid)); err == nil {
			parent = strings.TrimSpace(string(b))
		}
		if p.ppid == 1 || parent != "sandstep" && parent != "soak.test" {
			// A plugin may exit on its own a moment after its host
			// died; only one that stays is an orphan.
			if !awaitExit(p.pid, 5*time.Second) {
				w.orphans++
				w.t.Errorf("orphaned plugin process %d (%s), parent %d (%s)", p.pid, exe, p.ppid, parent)
				syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
	}
}

// awaitExit waits, through a pidfd, for process pid to end.
func awaitExit(pid int, limit time.Duration) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return errors.Is(err, unix.ESRCH)
	}
	defer unix.Close(fd)
	deadline := time.Now().Add(limit)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(left.Milliseconds())+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && n > 0
	}
}

// logScanner copies the server's stderr to a file and hands each line to
// onLine.
type logScanner struct {
	w      io.Writer
	onLine func([]byte)
	buf    []byte
}

func (l *logScanner) Write(p []byte) (int, error) {
	n, err := l.w.Write(p)
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.onLine(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
	return n, err
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	return string(b)
}

// do calls the server's API with the dev token.
func (w *world) do(method, path string, body any) (int, map[string]any, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://"+w.addr+path, rd)
	req.Header.Set("Authorization", "Bearer "+devToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			return resp.StatusCode, nil, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, raw)
		}
	}
	return resp.StatusCode, out, nil
}

func (w *world) mustDo(method, path string, body any) (int, map[string]any) {
	w.t.Helper()
	code, out, err := w.do(method, path, body)
	if err != nil {
		w.t.Fatal(err)
	}
	return code, out
}

func (w *world) submit(id string, seeds []string) {
	w.t.Helper()
	code, out := w.mustDo("POST", "/v1/jobs", map[string]any{"query": "kestrel fixtures", "job_id": id, "seed_urls": seeds})
	if code != http.StatusAccepted {
		w.t.Fatalf("submit %s: %d %v", id, code, out)
	}
}

// awaitEnd follows the job's event stream until its "end" event, and
// returns the job. A stream cut by the server's death is not an end.
func (w *world) awaitEnd(ctx context.Context, id string) (map[string]any, error) {
	last := "0"
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("job %s did not end: %w", id, err)
		}
		ended, seen, err := w.follow(ctx, id, last)
		if seen != "" {
			last = seen
		}
		if ended {
			_, job, err := w.do("GET", "/v1/jobs/"+id, nil)
			return job, err
		}
		if err != nil {
			// The server is down or restarting: wait for it.
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

// follow reads one event stream; it reports whether the end came and the
// id of the last event seen.
func (w *world) follow(ctx context.Context, id, after string) (bool, string, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+w.addr+"/v1/jobs/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+devToken)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", after)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return false, "", fmt.Errorf("events of %s: %d %s", id, resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	seen := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			seen = strings.TrimPrefix(line, "id: ")
		case line == "event: end":
			return true, seen, nil
		}
	}
	return false, seen, errors.New("stream cut")
}

// stateStore opens the running server's DynamoDB Local.
func (w *world) stateStore() *store.Store {
	w.t.Helper()
	s := w.server()
	if s == nil {
		w.t.Fatal("no server is running")
	}
	return store.NewLocal(s.endpoint, s.prefix)
}

// provider opens the configured provider beside the server's, on the same
// state, to list what is alive there.
func (w *world) provider() providers.Provider {
	w.t.Helper()
	cfg, err := config.Load(w.cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	p, err := providerhost.Open(context.Background(), cfg, "", slog.New(slog.DiscardHandler))
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { p.Close() })
	return p
}

// liveLedger lists the ledger's open entries.
func liveLedger(t testing.TB, st *store.Store) []store.LedgerEntry {
	t.Helper()
	live, err := st.LedgerListLive(context.Background(), time.Now().AddDate(100, 0, 0), 0)
	if err != nil {
		t.Fatal(err)
	}
	return live
}

// aliveSandboxes lists the provider's running sandboxes of ours.
func aliveSandboxes(t testing.TB, p providers.Provider) []providers.Sandbox {
	t.Helper()
	list, err := p.List(context.Background(), providers.ListFilter{Labels: map[string]string{providers.LabelOwner: "sandstep"}})
	if err != nil {
		t.Fatal(err)
	}
	var out []providers.Sandbox
	for _, sb := range list {
		if sb.State == "" || sb.State == providers.StateRunning {
			out = append(out, sb)
		}
	}
	return out
}

// checkEvents checks a job's events: seqs 1..n without a gap or a
// repeat, and its terminal event exactly once, saying how it ended.
func checkEvents(st *store.Store, id, status string) error {
	evs, err := st.ListEvents(context.Background(), id, 0, store.MaxEventPage)
	for err == nil && len(evs)%store.MaxEventPage == 0 && len(evs) > 0 {
		more, merr := st.ListEvents(context.Background(), id, evs[len(evs)-1].Seq, store.MaxEventPage)
		if merr != nil || len(more) == 0 {
			err = merr
			break
		}
		evs = append(evs, more...)
	}
	if err != nil {
		return err
	}
	finished := 0
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			return fmt.Errorf("job %s: event %d has seq %d (lost or repeated)", id, i+1, ev.Seq)
		}
		if ev.Type == "job" {
			var d struct {
				Status string `json:"status"`
			}
			json.Unmarshal(ev.Data, &d)
			if d.Status == status {
				finished++
			}
		}
	}
	if finished != 1 {
		return fmt.Errorf("job %s: %d events saying it ended %s, want 1", id, finished, status)
	}
	return nil
}

// gate holds the next request it sees until it is opened: a phase that is
// reliably in flight while the test kills the server.
type gate struct {
	mu      sync.Mutex
	armed   bool
	entered chan struct{}
	release chan struct{}
}

// arm makes the next request wait; the channel closes when it arrives.
func (g *gate) arm() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.entered, g.release = true, make(chan struct{}), make(chan struct{})
	return g.entered
}

// open lets the held request (and every later one) go.
func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed = false
	if g.release != nil {
		select {
		case <-g.release:
		default:
			close(g.release)
		}
	}
}

// pass is called by a handler: it waits while the gate holds it.
func (g *gate) pass(r *http.Request) {
	g.mu.Lock()
	if !g.armed {
		g.mu.Unlock()
		return
	}
	g.armed = false
	entered, release := g.entered, g.release
	g.mu.Unlock()
	close(entered)
	select {
	case <-release:
	case <-r.Context().Done():
	}
}

// searx is a SearxNG JSON API answering with the pages set, behind a gate.
type searx struct {
	*httptest.Server
	gate
	mu      sync.Mutex
	results []map[string]any
}

func newSearx(t testing.TB) *searx {
	s := &searx{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.pass(r)
		s.mu.Lock()
		rs := s.results
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"query": r.URL.Query().Get("q"), "number_of_results": len(rs), "results": rs})
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *searx) answer(urls ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.results = nil
	for i, u := range urls {
		s.results = append(s.results, map[string]any{"url": u, "title": "result " + strconv.Itoa(i), "content": "a kestrel snippet", "engine": "fake", "score": 1.0 / float64(i+1)})
	}
}

// fakeLLM is an OpenAI-compatible chat API that streams a short report
// citing source [1], behind a gate.
func fakeLLM(t testing.TB, g *gate) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.pass(r)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, part := range []string{"## Executive summary\n\nKestrels hover [1].\n\n", "## Key findings\n\n- They hunt voles [1].\n"} {
			data, _ := json.Marshal(map[string]any{"model": "fixture-model", "choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": part}}}})
			fmt.Fprintf(w, "data: %s\n\n", data)
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// gatedPage serves one article page behind a gate, for a crawl that is in
// flight, and a JSON summary for the agent at /summary.
func gatedPage(t testing.TB, g *gate) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.pass(r)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, `<!doctype html><html><head><title>Held kestrels</title></head><body><article><h1>Held kestrels</h1>
<p>This page was held while the server died. Kestrels hover over fields and hunt voles; they nest in old buildings and
tree holes, and a pair raises four to six young each year.</p></article></body></html>`)
	}))
	t.Cleanup(srv.Close)
	return srv
}
