package api_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/api"
	"github.com/sandstep/sandstep/internal/service/quota"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/apitest"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
)

// The API process the quota test starts twice: this test binary run again
// with these variables set serves the API on 127.0.0.1 over the tables the
// test names, until its stdin closes.
const (
	envChild    = "SANDSTEP_TEST_API_CHILD"
	envEndpoint = "SANDSTEP_TEST_API_DDB"
	envPrefix   = "SANDSTEP_TEST_API_PREFIX"
	envConfig   = "SANDSTEP_TEST_API_CONFIG"
)

// runAPIChild is the child's whole life; TestMain calls it instead of the
// tests when envChild is set.
func runAPIChild() int {
	cfg, err := config.Parse([]byte(os.Getenv(envConfig)), "config.toml", os.TempDir())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	st := store.NewLocal(os.Getenv(envEndpoint), os.Getenv(envPrefix))
	auth, err := api.NewAuthenticator(config.AuthConfig{Tokens: []config.AuthToken{{Tenant: "acme", SHA256: hashOf(tokenAcme)}}},
		func(string) string { return "" }, "")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	h := api.New(api.Options{Store: st, Executor: &recordingExecutor{}, Auth: auth, Quotas: quota.New(st, &cfg.Quotas),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	// Every answer is checked against openapi.json here too; the parent
	// test fails on each mismatch the child reports.
	v, err := apitest.Spec()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	h = v.Middleware(h, func(err error) { fmt.Printf("OPENAPI %s\n", strings.ReplaceAll(err.Error(), "\n", " ")) })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := api.NewServer(h, config.DefaultServer(), nil)
	go srv.Serve(l)
	fmt.Printf("LISTEN %s\n", l.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = srv.Close()
	return 0
}

// startAPIProcess starts one API process over the tables and returns its
// base URL.
func startAPIProcess(t *testing.T, db *testddb.TestEnv, cfg string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=1", envEndpoint+"="+db.Endpoint, envPrefix+"="+db.Prefix, envConfig+"="+cfg)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	scanned := make(chan []string, 1)
	go func() {
		var mismatches []string
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "LISTEN "); ok {
				line <- addr
			}
			if m, ok := strings.CutPrefix(sc.Text(), "OPENAPI "); ok {
				mismatches = append(mismatches, m)
			}
		}
		scanned <- mismatches
	}()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case mismatches := <-scanned:
			for _, m := range mismatches {
				t.Errorf("OpenAPI (API process): %s", m)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
		_ = cmd.Wait()
	})
	select {
	case addr := <-line:
		return "http://" + addr
	case <-time.After(30 * time.Second):
		t.Fatal("the API process did not start listening")
	}
	return ""
}

// 20 submissions at once, spread over two API processes sharing one
// DynamoDB Local, against concurrent_jobs = 5: exactly 5 jobs are created
// and started, the other 15 are refused with 429 naming the quota, and
// none of them leaves a record or a slot behind. A job that ends frees its
// slot for the next submission.
func TestConcurrentJobsQuotaAcrossTwoAPIProcesses(t *testing.T) {
	db := testddb.ForTests(t)
	const cfg = "[quotas]\nconcurrent_jobs = 5\n"
	urls := []string{startAPIProcess(t, db, cfg), startAPIProcess(t, db, cfg)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	type answer struct {
		id     string
		status int
		retry  string
		body   string
	}
	answers := make([]answer, 20)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("burst-%02d", i)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, urls[i%2]+"/v1/jobs",
				strings.NewReader(fmt.Sprintf(`{"query":"solar panels","job_id":%q}`, id)))
			req.Header.Set("Authorization", "Bearer "+tokenAcme)
			req.Header.Set("Content-Type", "application/json")
			<-start
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			answers[i] = answer{id: id, status: res.StatusCode, retry: res.Header.Get("Retry-After"), body: string(b)}
		}()
	}
	close(start)
	wg.Wait()

	st := store.NewLocal(db.Endpoint, db.Prefix)
	var accepted []string
	for _, a := range answers {
		job, err := st.GetJob(ctx, acmeKey(a.id))
		switch a.status {
		case http.StatusAccepted:
			accepted = append(accepted, a.id)
			if err != nil || job.ExecutionID == "" {
				t.Errorf("%s accepted, but its job is %+v (%v)", a.id, job, err)
			}
		case http.StatusTooManyRequests:
			var body struct {
				Error struct {
					Code, Limit, Scope string
					Max                int64
				}
			}
			if err := jsonUnmarshal(a.body, &body); err != nil || body.Error.Code != "limit_exceeded" || body.Error.Limit != "concurrent_jobs" ||
				body.Error.Max != 5 || body.Error.Scope != "tenant" || a.retry == "" {
				t.Errorf("%s refused with %s (Retry-After %q)", a.id, a.body, a.retry)
			}
			if !errors.Is(err, store.ErrNotFound) {
				t.Errorf("%s was refused but its job exists: %+v, %v", a.id, job, err)
			}
		default:
			t.Errorf("%s: %d %s", a.id, a.status, a.body)
		}
	}
	if len(accepted) != 5 {
		t.Fatalf("%d jobs accepted, want exactly 5: %v", len(accepted), accepted)
	}
	holders, err := st.SlotHolders(ctx, "acme", store.QuotaConcurrentJobs)
	if err != nil || len(holders) != 5 {
		t.Fatalf("slot holders %v, %v", holders, err)
	}

	// A resubmission of an accepted job is answered as before, not refused.
	resubmit := func(url, id string) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/jobs", strings.NewReader(fmt.Sprintf(`{"query":"solar panels","job_id":%q}`, id)))
		req.Header.Set("Authorization", "Bearer "+tokenAcme)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	if res := resubmit(urls[1], accepted[0]); res.StatusCode != http.StatusOK {
		t.Fatalf("resubmitting %s: %d", accepted[0], res.StatusCode)
	}
	if res := resubmit(urls[0], "one-more"); res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a sixth job while five run: %d", res.StatusCode)
	}
	// One ends: the next job gets its slot.
	if _, err := st.SetStatus(ctx, acmeKey(accepted[0]), nil, store.StatusCancelled); err != nil {
		t.Fatal(err)
	}
	if res := resubmit(urls[1], "one-more"); res.StatusCode != http.StatusAccepted {
		t.Fatalf("a job after one ended: %d", res.StatusCode)
	}
}

func storeUsage(searches int64) store.Usage {
	return store.Usage{SearchCalls: map[string]int64{"searxng": searches}}
}
