package soak

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/ids"
	"github.com/sandstep/sandstep/internal/testkit/testbin"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
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
	return testddb.RunTests(m)
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
	// allowPrivate is [sandbox] allow_private: the fixture web on
	// 127.0.0.1, which the sandboxes' network policy refuses otherwise.
	allowPrivate []string
	// dnsServers is [provider.local] dns_servers: names the sandboxes
	// reach (sandstep's own, for an agent's children) by a test resolver.
	dnsServers []string
	// apiURL is [sandboxes] api_url: sandstep as the sandboxes reach it.
	apiURL string
	// agents are [agents.<name>] tables, as TOML.
	agents string
}

// jobKey is the store key, execution name and ledger owner's id of the
// dev tenant's job id: what the engine, the phases and the store see.
func jobKey(id string) string { return ids.JobKey("dev", id) }

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
dns_servers = %s
[provider.sandy]
base_url = %q
api_key_env = "SANDSTEP_TEST_SANDY_KEY"
retry_base_delay = "10ms"
[sandbox]
lifetime = "10m"
allow_private = %s
[sandboxes]
api_url = %q
[research]
render = "never"
[research.search]
backends = ["searxng"]
searxng_url = %q
`, w.dir, s.provider, bins.plugins, bins.tools, tomlList(s.dnsServers), s.sandyURL, tomlList(s.allowPrivate), s.apiURL, w.search.URL)
	if s.agent != "" {
		text += fmt.Sprintf("[research.agent]\nenabled = true\nmodel = \"m\"\ncommand = %q\ntimeout = \"2m\"\n", s.agent)
	}
	if s.llm != "" {
		text += fmt.Sprintf("[research.llm]\nbase_url = %q\napi_key_env = \"\"\nmodels = [\"fixture-model\"]\ntimeout = \"2m\"\n", s.llm)
	}
	text += s.agents
	if s.sessions {
		text += "[sessions]\nenabled = true\nsync_wait = \"1s\"\nreaper_interval = \"1h\"\n"
	}
	return text
}

// world is a data dir and everything around the server that outlives its
// restarts: the fake search engine, the fault controller, the fixture web.
type world struct {
	t    testing.TB
	dir  string
	addr string
	// rebinds counts the starts that found addr taken and moved.
	rebinds int
	logs    string // the servers' stderr, one file per start
	search  *searx
	faults  *controller
	cfg     string // config file
	// template is the template.yaml the server reads ("" = the
	// repository's).
	template string

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
	w.addr = freeAddr(t)
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
	template := w.template
	if template == "" {
		root, _ := testbin.Root()
		template = filepath.Join(root, "template.yaml")
	}
	cmd := exec.Command(bins.cli, "serve", "--config", w.cfg, "--addr", w.addr)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + w.dir,
		"SANDSTEP_DEV_TOKEN=" + devToken,
		"SANDSTEP_TEMPLATE=" + template,
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
			// The address was free when chosen; on a machine running
			// other tests something may take it before a restart binds it
			// again. The clients read w.addr, so a new one serves them.
			if log := tail(logPath); strings.Contains(log, "address already in use") && w.rebinds < 3 {
				w.rebinds++
				w.addr = freeAddr(w.t)
				return w.start()
			}
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

// freeAddr is a 127.0.0.1 address no one listens on now.
func freeAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
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

// tomlList writes strings as a TOML array.
func tomlList(v []string) string {
	q := make([]string, len(v))
	for i, s := range v {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
