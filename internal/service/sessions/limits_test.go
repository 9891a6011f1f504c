package sessions_test

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/testkit/testhost"
)

// watchServer polls /healthz until stop and counts the answers that were
// not 200.
func (e *env) watchServer() (stop func() (ok, failed int64)) {
	var okN, failN atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		client := &http.Client{Timeout: 2 * time.Second}
		for i := 0; i < 10000; i++ {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			res, err := client.Get(e.srv.URL + "/healthz")
			if err != nil {
				failN.Add(1)
				continue
			}
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				failN.Add(1)
				continue
			}
			okN.Add(1)
		}
	}()
	return func() (int64, int64) {
		close(done)
		wg.Wait()
		return okN.Load(), failN.Load()
	}
}

// A run that allocates past twice the session's memory_mb is killed inside
// its sandbox and says so; the host gives it no more than the limit, the
// server answers throughout, and the session runs code again at once.
func TestRunOutOfMemory(t *testing.T) {
	e := newEnv(t, envConfig{sessions: "memory_mb = 256"})
	wantOK(t, e.run(tokenAcme, "mem", "shell", "true"))
	stopServer := e.watchServer()
	watch, err := testhost.WatchMemory(5*time.Millisecond, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// 64 MiB at a time up to four times the limit: killed at the limit,
	// past twice it.
	run := e.run(tokenAcme, "mem", "python", "chunks = [b'x' * (64 << 20) for i in range(16)]\nprint('survived')\nlen(chunks)")
	drop, err := watch.Stop()
	if err != nil {
		t.Fatal(err)
	}
	ok, failed := stopServer()

	msg, _ := run["error"].(string)
	if run["success"] != false || run["oom"] != true || !strings.Contains(msg, "out of memory") || !strings.Contains(msg, "256 MiB") || strings.Contains(run["stdout"].(string), "survived") {
		t.Fatalf("run = %v; want an out-of-memory error", run)
	}
	t.Logf("host MemAvailable dropped by %d MiB at most; /healthz answered %d times, failed %d", drop>>20, ok, failed)
	// Unlimited, the run would take 1 GiB; the bound leaves room for the
	// other programs of a shared machine, not for the sandbox.
	if drop > (256+384)<<20 {
		t.Errorf("host MemAvailable dropped by %d MiB for a 256 MiB session", drop>>20)
	}
	if failed > 0 || ok == 0 {
		t.Errorf("/healthz: %d answers, %d failures during the run", ok, failed)
	}
	again := e.run(tokenAcme, "mem", "python", "6 * 7")
	wantOK(t, again)
	if string(toJSON(t, again["result"])) != "42" {
		t.Fatalf("the next run = %v", again)
	}
}

// A session's volume holds volume_capacity_mb and a sandbox's /tmp its
// tmp_size_mb: a run writing past either gets "No space left on device",
// and what fits is kept.
func TestRunPastVolumeCapacityAndTmp(t *testing.T) {
	e := newEnv(t, envConfig{sessions: "volume_capacity_mb = 24", local: "tmp_size_mb = 16"})
	wantOK(t, e.run(tokenAcme, "disk", "shell", "echo kept > /workspace/small"))
	for _, dir := range []string{"/workspace", "/tmp"} {
		run := e.run(tokenAcme, "disk", "shell", "head -c 48000000 /dev/zero > "+dir+"/big")
		if run["success"] != false || !strings.Contains(run["stderr"].(string), "No space left on device") {
			t.Errorf("writing 48 MB into %s: %v", dir, run)
		}
	}
	out := wantOK(t, e.run(tokenAcme, "disk", "shell", "rm /workspace/big && cat /workspace/small && df -m /workspace | tail -1 | awk '{print $2}'"))
	lines := strings.Fields(out)
	if len(lines) != 2 || lines[0] != "kept" {
		t.Fatalf("after freeing the volume: %q", out)
	}
	if size, _ := strconv.Atoi(lines[1]); size > 24 || size < 16 {
		t.Errorf("the volume's file system holds %s MiB; want about 24", lines[1])
	}
}
