package load_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/emulation/localstack"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/fixturesite"
	"github.com/sandstep/sandstep/internal/testkit/testbin"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
	"github.com/sandstep/sandstep/providers"
)

// bins holds the local provider plugin and the crawler, built once.
var bins struct{ plugins, tools string }

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// Only benchmarks here: a plain `go test ./...` (make test) builds
	// nothing.
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "sandstep-load-")
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
	if bins.plugins, err = testbin.Build(filepath.Join(dir, "plugins"), testbin.LocalPlugin); err == nil {
		bins.tools, err = testbin.Build(filepath.Join(dir, "tools"), testbin.Crawler)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return testddb.RunTests(m)
}

const token = "load-token-0c7d1e93a5b2f486"

// stack is the local stack in this process behind an HTTP server on
// 127.0.0.1, over tables of the benchmark's own.
type stack struct {
	b    *testing.B
	s    *localstack.Stack
	srv  *httptest.Server
	st   *store.Store
	site *fixturesite.Site
	// polls counts the benchmark's own status reads, whose store calls
	// are not the job's.
	polls atomic.Int64
}

func newStack(b *testing.B, extra string) *stack {
	b.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		b.Fatalf("bubblewrap is missing: %v", err)
	}
	db := testddb.ForTests(b)
	site := fixturesite.Start(b, fixturesite.Options{Hosts: 3})
	// A SearxNG that finds the fixture web's third host for every query.
	searx := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"query": r.URL.Query().Get("q"), "number_of_results": 1, "results": []any{
			map[string]any{"url": site.Hosts[2].Page("/a"), "title": "kestrels", "content": "a kestrel snippet", "engine": "fake", "score": 1.0},
		}})
	}))
	b.Cleanup(searx.Close)
	sum := sha256Hex(token)
	cfgText := fmt.Sprintf(`
[server]
data_dir = %q
[provider]
name = "local"
plugin_dir = %q
[provider.local]
tools_dir = %q
[sandbox]
lifetime = "10m"
allow_private = %s
[research]
render = "never"
[research.search]
backends = ["searxng"]
searxng_url = %q
[auth]
dev_token_env = ""
[[auth.tokens]]
tenant = "load"
sha256 = %q
%s
`, b.TempDir(), bins.plugins, bins.tools, tomlList(site.AllowPrivate()), searx.URL, sum, extra)
	cfg, err := config.Parse([]byte(cfgText), "config.toml", "../../..")
	if err != nil {
		b.Fatal(err)
	}
	st := store.New(db.Client, db.Prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := localstack.Start(ctx, localstack.Options{
		Config: cfg, Template: "../../../template.yaml", Store: st, ReaperInterval: -1,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	k := &stack{b: b, s: s, srv: httptest.NewServer(s.Handler), st: st, site: site}
	b.Cleanup(func() {
		k.srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			b.Errorf("shutdown: %v", err)
		}
	})
	return k
}

func (k *stack) do(method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, k.srv.URL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := k.srv.Client().Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, b, err
}

// job submits one research job and waits for its end; it returns how long
// it took and how it ended.
func (k *stack) job(id string) (time.Duration, string, error) {
	start := time.Now()
	code, body, err := k.do(http.MethodPost, "/v1/jobs", map[string]any{
		"job_id": id, "query": "kestrel fixtures " + id, "mode": "light",
		"seed_urls": []string{k.site.Hosts[0].Page("/a"), k.site.Hosts[1].Page("/a")},
	})
	if err != nil || code != http.StatusAccepted {
		return 0, "", fmt.Errorf("submitting %s: %d %s %v", id, code, body, err)
	}
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		k.polls.Add(1)
		code, body, err := k.do(http.MethodGet, "/v1/jobs/"+id, nil)
		if err != nil || code != http.StatusOK {
			return 0, "", fmt.Errorf("status of %s: %d %s %v", id, code, body, err)
		}
		var st struct {
			Status string `json:"status"`
		}
		json.Unmarshal(body, &st)
		switch st.Status {
		case "succeeded", "failed", "cancelled":
			return time.Since(start), st.Status, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0, "", fmt.Errorf("job %s did not end within 10 minutes", id)
}

// pollCost is how many store calls one status read of job id makes.
func (k *stack) pollCost(id string) int64 {
	before := k.st.Stats()
	if code, body, err := k.do(http.MethodGet, "/v1/jobs/"+id, nil); err != nil || code != http.StatusOK {
		k.b.Fatalf("status of %s: %d %s %v", id, code, body, err)
	}
	return k.st.Stats().Sub(before).Total()
}

// BenchmarkResearchLoad runs N research jobs at once (light mode, two seed
// pages of the fixture web each, and a third that the fake SearxNG finds) on the local stack: jobs-per-min, job
// time p50/p95, peak RSS of this process (the server, in-process, with the
// benchmark's own client) and of the plugin with every sandbox, DynamoDB
// calls per job (the benchmark's status reads, every 100 ms, taken out),
// and what is left afterwards (sandboxes, open ledger
// entries, processes): must be nothing.
func BenchmarkResearchLoad(b *testing.B) {
	k := newStack(b, "")
	seq := 0
	for _, n := range []int{1, 5, 10, 25} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			var times []time.Duration
			var wall time.Duration
			before := k.st.Stats()
			peak := watchMemory()
			var failed atomic.Int64
			for b.Loop() {
				first := seq + 1
				seq += n
				ts, w := together(b, n, func(i int) (time.Duration, error) {
					d, status, err := k.job(fmt.Sprintf("load-%d", first+i))
					if err == nil && status != "succeeded" {
						failed.Add(1)
					}
					return d, err
				})
				times, wall = append(times, ts...), wall+w
			}
			b.StopTimer()
			self, others := peak.stop()
			calls := k.st.Stats().Sub(before)
			polls := k.polls.Swap(0)
			perPoll := k.pollCost(fmt.Sprintf("load-%d", seq))
			slices.Sort(times)
			if len(times) == 0 {
				return
			}
			b.ReportMetric(float64(len(times))/wall.Minutes(), "jobs/min")
			b.ReportMetric(float64(calls.Total()-polls*perPoll)/float64(len(times)), "ddb-calls/job")
			b.ReportMetric(float64(polls)/float64(len(times)), "status-reads/job")
			b.ReportMetric(pct(times, 0.50), "job-p50-ms")
			b.ReportMetric(pct(times, 0.95), "job-p95-ms")
			b.ReportMetric(float64(self)/(1<<20), "server-peak-MiB")
			b.ReportMetric(float64(others)/(1<<20), "plugin+sandboxes-peak-MiB")
			b.ReportMetric(float64(calls.ItemWrites)/float64(len(times)), "ddb-writes/job")
			b.ReportMetric(float64(failed.Load()), "failed-jobs")
			k.leaks(b)
		})
	}
}

// BenchmarkSessionRunsLoad runs `true` in 200 sessions at once, each with
// its sandbox up (a warm run): runs/s and run time p50/p95, with the same
// memory and leak figures.
func BenchmarkSessionRunsLoad(b *testing.B) {
	const n = 200
	k := newStack(b, "[sessions]\nenabled = true\nsync_wait = \"25s\"\nreaper_interval = \"1h\"\n")
	run := func(sid string) (time.Duration, error) {
		start := time.Now()
		code, body, err := k.do(http.MethodPost, "/v1/sessions/"+sid+"/run", map[string]any{"code": "true", "language": "shell"})
		if err != nil || code != http.StatusOK || !bytes.Contains(body, []byte(`"success":true`)) {
			return 0, fmt.Errorf("run in %s: %d %s %v", sid, code, body, err)
		}
		return time.Since(start), nil
	}
	// Warm: every session has its sandbox.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := run(fmt.Sprintf("load-%d", i)); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	if b.Failed() {
		return
	}
	var times []time.Duration
	var wall time.Duration
	peak := watchMemory()
	before := k.st.Stats()
	for b.Loop() {
		ts, w := together(b, n, func(i int) (time.Duration, error) { return run(fmt.Sprintf("load-%d", i)) })
		times, wall = append(times, ts...), wall+w
	}
	b.StopTimer()
	self, others := peak.stop()
	calls := k.st.Stats().Sub(before)
	slices.Sort(times)
	if len(times) == 0 {
		return
	}
	b.ReportMetric(float64(len(times))/wall.Seconds(), "runs/s")
	b.ReportMetric(pct(times, 0.50), "run-p50-ms")
	b.ReportMetric(pct(times, 0.95), "run-p95-ms")
	b.ReportMetric(float64(self)/(1<<20), "server-peak-MiB")
	b.ReportMetric(float64(others)/(1<<20), "plugin+sandboxes-peak-MiB")
	b.ReportMetric(float64(calls.Total())/float64(len(times)), "store-calls/run")
	// Every session is deleted: then nothing may be left.
	for i := range n {
		if code, body, err := k.do(http.MethodDelete, fmt.Sprintf("/v1/sessions/load-%d", i), nil); err != nil || code != http.StatusOK {
			b.Errorf("deleting session load-%d: %d %s %v", i, code, body, err)
		}
	}
	k.leaks(b)
}

// together calls f(0), ..., f(n-1) at once and returns how long each
// successful call took and the time until the last ended; a failed call
// fails the benchmark.
func together(b *testing.B, n int, f func(i int) (time.Duration, error)) ([]time.Duration, time.Duration) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	var times []time.Duration
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := f(i)
			if err != nil {
				b.Error(err)
				return
			}
			mu.Lock()
			times = append(times, d)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return times, time.Since(start)
}

// leaks fails the benchmark when, after a grace period, a sandbox, an open
// ledger entry or a sandbox process outlives the work.
func (k *stack) leaks(b *testing.B) {
	b.Helper()
	ctx := context.Background()
	var sbs []providers.Sandbox
	var live []store.LedgerEntry
	var procs []string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		sbs, _ = k.s.Provider.List(ctx, providers.ListFilter{})
		live, _ = k.st.LedgerListLive(ctx, time.Now().Add(24*time.Hour), 1000)
		procs = sandboxProcs()
		if len(sbs)+len(live)+len(procs) == 0 || time.Now().After(deadline) {
			break
		}
	}
	b.ReportMetric(float64(len(sbs)), "leaked-sandboxes")
	b.ReportMetric(float64(len(live)), "open-ledger-entries")
	b.ReportMetric(float64(len(procs)), "leaked-sandbox-procs")
	if len(sbs)+len(live)+len(procs) != 0 {
		b.Errorf("left behind: %d sandboxes, %d open ledger entries, sandbox processes %q", len(sbs), len(live), procs)
	}
}

func pct(sorted []time.Duration, p float64) float64 {
	i := min(int(p*float64(len(sorted))), len(sorted)-1)
	return float64(sorted[i]) / float64(time.Millisecond)
}

// memoryWatch samples, every 50 ms, this process's RSS and the summed RSS
// of the provider plugin and its descendants (bwrap and everything in the
// sandboxes), keeping the peaks.
type memoryWatch struct {
	stopc        chan struct{}
	done         chan struct{}
	self, others int64
}

func watchMemory() *memoryWatch {
	w := &memoryWatch{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			w.sample()
			select {
			case <-w.stopc:
				return
			case <-t.C:
			}
		}
	}()
	return w
}

func (w *memoryWatch) sample() {
	w.self = max(w.self, rss(os.Getpid()))
	var sum int64
	for _, p := range plugins() {
		sum += rss(p)
		for _, d := range descendants(p) {
			sum += rss(d)
		}
	}
	w.others = max(w.others, sum)
}

func (w *memoryWatch) stop() (self, others int64) {
	close(w.stopc)
	<-w.done
	return w.self, w.others
}

// rss is VmRSS of pid in bytes.
func rss(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func comm(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(b))
}

// descendants lists the processes below root.
func descendants(root int) []int {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+2:]))
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], pid)
	}
	var out []int
	for queue := []int{root}; len(queue) > 0; queue = queue[1:] {
		for _, c := range children[queue[0]] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// plugins lists the provider plugin processes this process started.
func plugins() []int {
	var out []int
	for _, p := range descendants(os.Getpid()) {
		// comm holds the first 15 bytes of sandstep-provider-local.
		if strings.HasPrefix(comm(p), "sandstep-provid") {
			out = append(out, p)
		}
	}
	return out
}

// sandboxProcs lists, as "pid comm", the processes below the plugin:
// bwrap and whatever runs in a sandbox.
func sandboxProcs() []string {
	var out []string
	for _, p := range plugins() {
		for _, d := range descendants(p) {
			out = append(out, fmt.Sprintf("%d %s", d, comm(d)))
		}
	}
	return out
}

func tomlList(v []string) string {
	q := make([]string, len(v))
	for i, s := range v {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
