package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/testkit/fakesandy"
	"github.com/sandstep/sandstep/internal/testkit/fixturesite"
	"github.com/sandstep/sandstep/providers"
)

// The soak's knobs, from the environment (make soak N=... SEED=...).
const (
	envN    = "SOAK_N"      // jobs; default defaultN
	envSeed = "SOAK_SEED"   // the dice; default: the clock, printed
	envOut  = "SOAK_REPORT" // a file for the figures as JSON; default none
	// defaultN is what CI runs: two rounds, one on each provider, with
	// every kind of fault at least once.
	defaultN = 6
	// roundSize jobs run at once; every third round runs on Sandy.
	roundSize = 10
)

// phaseFunctions are the Tasks a research job invokes (no agent here).
var phaseFunctions = []string{"DiscoverFunction", "ProvisionFunction", "CrawlFunction", "ReportFunction", "CleanupFunction"}

// Fault kinds, as the report names them.
const (
	faultRetried    = "phase_failure_retried"     // Lambda.ServiceException before the handler: Retry runs it again
	faultFatal      = "phase_failure_fatal"       // an error no Lambda Retry takes: Catch, cleanup, the job fails (Cleanup itself retries it)
	faultLost       = "phase_result_lost"         // the handler ran and its answer was lost: it runs twice
	faultPluginKill = "plugin_kill_9"             // the provider plugin killed with SIGKILL
	faultServerKill = "server_kill_9_and_restart" // sandstep serve killed with SIGKILL, then started again
	faultCancel     = "cancel"                    // POST /cancel at a random moment, answered 202
	fault5xx        = "provider_502"              // the fake Sandy's "Upstream error"
	fault429        = "provider_429"              // the fake Sandy's rate limit
)

// soakReport is what the soak measured.
type soakReport struct {
	Seed     uint64         `json:"seed"`
	Jobs     int            `json:"jobs"`
	ByStatus map[string]int `json:"jobs_by_status"`
	ByProv   map[string]int `json:"jobs_by_provider"`
	Faults   map[string]int `json:"faults_injected"`
	Stuck    int            `json:"stuck_jobs"`
	Leaked   int            `json:"leaked_sandboxes"`
	// Unrecorded are Sandy sandboxes whose create was cut by a server or
	// plugin kill before the ledger learnt their id: Sandy has no idempotent
	// create, no names and no listing, so nothing can find them; they end
	// at the TTL every sandbox is created with (the job's lifetime).
	Unrecorded int    `json:"sandy_sandboxes_orphaned_by_a_kill_during_create"`
	OpenLedg   int    `json:"open_ledger_entries"`
	LostOrDup  int    `json:"jobs_with_lost_or_duplicated_events"`
	Records    int    `json:"execution_records_left"`
	Orphans    int    `json:"orphaned_processes"`
	Restarts   int    `json:"server_starts"`
	WallTime   string `json:"wall_time"`
	Machine    string `json:"machine"`
}

// soak is one run of TestSoak.
type soak struct {
	t      *testing.T
	w      *world
	rng    *rand.Rand
	site   *fixturesite.Site
	sandy  *fakesandy.Server
	sandyU string
	prov   map[string]providers.Provider // our own view of each provider

	mu     sync.Mutex
	faults map[string]int
	rep    soakReport
	// killedDuringRound: the server or a plugin was killed in this
	// round.
	killedDuringRound atomic.Bool
}

func TestSoak(t *testing.T) {
	n := defaultN
	if v := os.Getenv(envN); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("%s=%q: want a number of jobs", envN, v)
		}
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(envSeed); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: want a number", envSeed, v)
		}
	}
	// Printed first, so that a failing soak can be replayed.
	fmt.Printf("soak: %d jobs, seed %d (replay: make soak N=%d SEED=%d)\n", n, seed, n, seed)
	t.Logf("soak: %d jobs, seed %d", n, seed)

	w := newWorld(t)
	sk := &soak{t: t, w: w, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), faults: map[string]int{}, prov: map[string]providers.Provider{}}
	sk.rep = soakReport{Seed: seed, Jobs: n, ByStatus: map[string]int{}, ByProv: map[string]int{}, Machine: machine()}
	sk.site = fixturesite.Start(t, fixturesite.Options{Hosts: 2})
	sk.startSandy()
	w.search.answer(sk.site.Hosts[0].Page("/a"), sk.site.Hosts[1].Page("/b"))

	start := time.Now()
	size := min(roundSize, max(1, (n+1)/2))
	current := ""
	for round, done := 0, 0; done < n; round++ {
		jobs := min(size, n-done)
		provider := "local"
		if round%3 == 1 {
			provider = "sandy"
		}
		if provider != current {
			// A provider is a line of config: the server starts again
			// with it. Its state was checked clean at the end of the
			// last round.
			w.stop()
			w.configure(setup{provider: provider, sandyURL: sk.sandyU, allowPrivate: sk.site.AllowPrivate()})
			w.start()
			current = provider
			if provider == "local" && sk.prov[provider] == nil {
				sk.prov[provider] = w.provider()
			}
		}
		roundStart := time.Now()
		sk.round(round, provider, done, jobs)
		done += jobs
		fmt.Printf("soak: round %d (%s): %d/%d jobs in %v, faults so far %v\n", round, provider, done, n, time.Since(roundStart).Round(time.Millisecond), sk.faultCounts())
		if t.Failed() {
			break
		}
	}
	sk.rep.WallTime = time.Since(start).Round(time.Second).String()
	w.noOrphanPlugins()
	sk.rep.Orphans = w.orphans
	sk.rep.Restarts = w.starts
	sk.rep.Faults = sk.faultCounts()
	out, _ := json.MarshalIndent(sk.rep, "", "  ")
	fmt.Printf("soak report:\n%s\n", out)
	if path := os.Getenv(envOut); path != "" {
		os.WriteFile(path, append(out, '\n'), 0o644)
	}
	if r := sk.rep; r.Stuck+r.Leaked+r.OpenLedg+r.LostOrDup+r.Records+r.Orphans > 0 {
		t.Errorf("the soak broke an invariant (seed %d): %s", seed, out)
	}
}

func machine() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return fmt.Sprintf("%d CPUs, load %s", runtime.NumCPU(), strings.Join(strings.Fields(string(b))[:3], " "))
}

// startSandy serves the fake Sandy with its faults on, counting them.
func (sk *soak) startSandy() {
	fs, err := fakesandy.New(fakesandy.Options{
		APIKey: sandyKey,
		Dir:    sk.t.TempDir(),
		Faults: fakesandy.Faults{UpstreamErrorEvery: 9, RateLimitEvery: 13, RateLimitBurst: 2, WarmupExecFailures: 1},
	})
	if err != nil {
		sk.t.Fatal(err)
	}
	sk.sandy = fs
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		fs.ServeHTTP(rec, r)
		switch rec.status {
		case http.StatusBadGateway:
			sk.count(fault5xx)
		case http.StatusTooManyRequests:
			sk.count(fault429)
		}
	}))
	sk.t.Cleanup(func() { srv.Close(); fs.Close() })
	sk.sandyU = srv.URL
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (sk *soak) count(kind string) {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	sk.faults[kind]++
}

func (sk *soak) faultCounts() map[string]int {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	out := map[string]int{}
	for _, k := range []string{faultRetried, faultFatal, faultLost, faultPluginKill, faultServerKill, faultCancel, fault5xx, fault429} {
		out[k] = sk.faults[k]
	}
	return out
}

// jobPlan is what a job will suffer.
type jobPlan struct {
	id     string
	faults []plannedFault
	// cancelAt, when > 0, cancels the job when the server asks about it
	// for the cancelAt-th time.
	cancelAt int
}

type plannedFault struct {
	kind, function, when string
}

// plan draws a round's faults. The soak's first jobs get one kind each,
// so that every kind happens however small the soak; the rest draw at
// random, at most two phase faults per job (so that its retries get
// through, as Lambda's transient failures do) and a cancel now and then.
func (sk *soak) plan(round, first, n int) []jobPlan {
	kinds := []string{faultRetried, faultFatal, faultLost}
	plans := make([]jobPlan, n)
	for i := range plans {
		p := &plans[i]
		k := first + i // the job's number in the soak
		p.id = fmt.Sprintf("soak-%d-%d", round, k)
		var draw []string
		switch {
		case k < len(kinds):
			draw = []string{kinds[k]}
		case k > len(kinds):
			for range 2 {
				if sk.rng.Float64() < 0.35 {
					draw = append(draw, kinds[sk.rng.IntN(len(kinds))])
				}
			}
		}
		for _, kind := range draw {
			f := plannedFault{kind: kind, function: phaseFunctions[sk.rng.IntN(len(phaseFunctions))], when: "before"}
			if k < len(kinds) {
				// On a phase every job reaches.
				f.function = map[string]string{faultRetried: "ProvisionFunction", faultFatal: "DiscoverFunction", faultLost: "CleanupFunction"}[kind]
			}
			if kind == faultLost {
				f.when = "after"
			}
			p.faults = append(p.faults, f)
		}
		switch {
		case k == len(kinds):
			p.cancelAt = 1 + sk.rng.IntN(4) // before it ends
		case sk.rng.Float64() < 0.12:
			p.cancelAt = 1 + sk.rng.IntN(12)
		}
	}
	return plans
}

var faultAnswers = map[string]answer{
	faultRetried: {Action: "fail", ErrorType: "Lambda.ServiceException", Message: "injected: the service failed"},
	faultFatal:   {Action: "fail", ErrorType: "InjectedFault", Message: "injected: the phase failed"},
	faultLost:    {Action: "fail", ErrorType: "Lambda.ServiceException", Message: "injected: the answer was lost"},
}

// round runs n jobs at once with their faults, a plugin kill and maybe a
// server kill, then checks every invariant.
func (sk *soak) round(round int, provider string, first, n int) {
	t, w := sk.t, sk.w
	plans := sk.plan(round, first, n)
	sk.killedDuringRound.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Server and plugin kills fall on the k-th question the round asks.
	expected := n * len(phaseFunctions) * 2
	serverKillAt := 0
	if round == 0 || sk.rng.Float64() < 0.5 {
		serverKillAt = 1 + sk.rng.IntN(expected/2)
	}
	pluginKillAt := 1 + sk.rng.IntN(expected/2)
	killServer := make(chan struct{}, 1)
	var asked atomic.Int64
	perJob := map[string]*atomic.Int64{}
	cancelAt := map[string]int{}
	idOfKey := map[string]string{} // the phases see keys
	var hits sync.WaitGroup
	for _, p := range plans {
		perJob[p.id] = &atomic.Int64{}
		idOfKey[jobKey(p.id)] = p.id
		cancelAt[p.id] = p.cancelAt
		for _, f := range p.faults {
			hit := w.faults.once(f.function, p.id, f.when, faultAnswers[f.kind])
			kind := f.kind
			hits.Add(1)
			go func() {
				defer hits.Done()
				select {
				case <-hit:
					sk.count(kind)
				case <-ctx.Done():
				}
			}()
		}
	}
	w.faults.setDecide(func(q question) answer {
		k := asked.Add(1)
		if int(k) == serverKillAt {
			select {
			case killServer <- struct{}{}:
			default:
			}
		}
		if int(k) == pluginKillAt {
			go sk.killPlugin()
		}
		if id, ok := idOfKey[q.JobID]; ok && q.When == "before" {
			if m := perJob[id].Add(1); int(m) == cancelAt[id] {
				go sk.cancel(ctx, id)
			}
		}
		return carryOn
	})
	defer w.faults.setDecide(nil)

	type result struct {
		id  string
		job map[string]any
		err error
	}
	results := make(chan result, n)
	for _, p := range plans {
		w.submit(p.id, []string{sk.site.Hosts[0].Page("/a")})
		go func(id string) {
			job, err := w.awaitEnd(ctx, id)
			results <- result{id, job, err}
		}(p.id)
	}
	ended := map[string]string{}
	for len(ended) < n {
		select {
		case <-killServer:
			sk.killedDuringRound.Store(true)
			w.kill()
			sk.count(faultServerKill)
			w.start()
		case r := <-results:
			status := "stuck"
			if r.err == nil {
				status, _ = r.job["status"].(string)
			}
			if status != "succeeded" && status != "failed" && status != "cancelled" {
				t.Errorf("job %s did not end: %v %v; server log:\n%s", r.id, r.job, r.err, tail(w.server().log))
				sk.rep.Stuck++
				status = "stuck"
			}
			ended[r.id] = status
		}
	}
	// Faults planned on phases a job never reached are dropped.
	w.faults.clear()
	cancel()
	hits.Wait()
	sk.check(provider, ended)
}

// killPlugin kills the server's provider plugin with SIGKILL.
func (sk *soak) killPlugin() {
	s := sk.w.server()
	if s == nil {
		return
	}
	for _, c := range childrenOf(s.pid) {
		if strings.HasPrefix(c.comm, pluginComm) && syscall.Kill(c.pid, syscall.SIGKILL) == nil {
			sk.killedDuringRound.Store(true)
			sk.count(faultPluginKill)
		}
	}
}

// cancel asks for the job's cancellation, through a server restart if one
// is under way.
func (sk *soak) cancel(ctx context.Context, id string) {
	for ctx.Err() == nil {
		code, _, err := sk.w.do("POST", "/v1/jobs/"+id+"/cancel", nil)
		if err == nil {
			if code == http.StatusAccepted {
				sk.count(faultCancel)
			}
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// check verifies a round's invariants on the running server: every job
// ended once with gapless events, no sandbox alive, no ledger entry open,
// no execution record left.
func (sk *soak) check(provider string, ended map[string]string) {
	t, w := sk.t, sk.w
	st := w.stateStore()
	ids := make([]string, 0, len(ended))
	for id := range ended {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		status := ended[id]
		sk.rep.ByStatus[status]++
		sk.rep.ByProv[provider]++
		if status == "stuck" {
			continue
		}
		if err := checkEvents(st, id, status); err != nil {
			t.Error(err)
			sk.rep.LostOrDup++
		}
	}
	for _, e := range liveLedger(t, st) {
		t.Errorf("ledger entry %s (owner %s, %s) is open", e.Name, e.Owner, e.Provider)
		sk.rep.OpenLedg++
	}
	var alive []string
	if provider == "sandy" {
		// Every id the ledger ever held for these jobs.
		recorded := map[string]bool{}
		for _, id := range ids {
			entries, err := st.LedgerListByOwner(context.Background(), "job:"+jobKey(id))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				recorded[e.ProviderID] = true
			}
		}
		for _, id := range sk.sandy.Sandboxes() {
			if recorded[id] || !sk.killedDuringRound.Load() {
				alive = append(alive, id)
				continue
			}
			sk.rep.Unrecorded++
			t.Logf("sandy sandbox %s was created by a call a kill cut short; ending it as its TTL would", id)
			sk.sandy.Preempt(id)
		}
	} else {
		for _, sb := range aliveSandboxes(t, sk.prov[provider]) {
			alive = append(alive, sb.ID+" ("+sb.Name+")")
		}
	}
	for _, sb := range alive {
		t.Errorf("sandbox %s is alive after its job ended", sb)
		sk.rep.Leaked++
	}
	// An execution's record goes right after it ends.
	deadline := time.Now().Add(time.Minute)
	for {
		recs, err := st.ListExecutions(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, r := range recs {
				t.Errorf("execution record %s (%s at %s) is left", r.Name, r.Status, r.State)
			}
			sk.rep.Records += len(recs)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
}
