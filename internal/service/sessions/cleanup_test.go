package sessions_test

import (
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/ids"
	"github.com/sandstep/sandstep/internal/service/store"
)

// sessionKey is the service's store key: sessions belong to tenants.
func sessionKey(tenant, id string) string { return ids.SessionKey(tenant, id) }

// The cleanup deletes exactly the sessions idle past the TTL at the time
// it runs: their volumes, sandboxes and records, with an event saying so
// first and after.
func TestCleanupDeletesExactlyTheExpired(t *testing.T) {
	cleanupDeletesExactlyTheExpired(t, envConfig{})
}

func cleanupDeletesExactlyTheExpired(t *testing.T, ec envConfig) {
	e := newEnv(t, ec)
	ctx := ctxFor(t)
	ids := []string{"old1", "old2", "new1", "new2"}
	for _, id := range ids {
		wantOK(t, e.run(tokenAcme, id, "shell", "echo "+id+" > /workspace/id"))
	}
	// new1 and new2 are used again, so they expire later than old1 and
	// old2; the cleanup runs in between.
	var oldest time.Time
	for _, id := range []string{"old1", "old2"} {
		s, err := e.st.GetSession(ctx, sessionKey("acme", id))
		if err != nil {
			t.Fatal(err)
		}
		oldest = later(oldest, s.IdleExpiresAt)
	}
	for time.Now().Add(30 * time.Minute).Before(oldest.Add(5 * time.Millisecond)) {
		time.Sleep(time.Millisecond)
	}
	for _, id := range []string{"new1", "new2"} {
		wantOK(t, e.run(tokenAcme, id, "shell", "cat /workspace/id"))
	}
	cut := oldest.Add(time.Millisecond)
	for _, id := range []string{"new1", "new2"} {
		s, err := e.st.GetSession(ctx, sessionKey("acme", id))
		if err != nil {
			t.Fatal(err)
		}
		if !s.IdleExpiresAt.After(cut) {
			t.Fatalf("%s expires at %v, not after the cut %v", id, s.IdleExpiresAt, cut)
		}
	}
	vols := map[string]string{}
	for _, id := range ids {
		vols[id] = e.session(tokenAcme, id)["volume"].(map[string]any)["slug"].(string)
	}

	// A pass a little before the cut warns the old sessions once.
	e.stack.Reaper.Now = func() time.Time { return cut.Add(-2 * time.Minute) }
	for range 2 {
		c, err := e.stack.Reaper.Pass(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if c.SessionsExpired != 0 {
			t.Fatalf("counts = %+v: nothing has expired yet", c)
		}
	}
	if got := e.events(tokenAcme, "old1"); countOf(got, "session.expiring") != 1 {
		t.Fatalf("old1 events = %v, want one session.expiring", got)
	}

	e.stack.Reaper.Now = func() time.Time { return cut }
	c, err := e.stack.Reaper.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.SessionsExpired != 2 {
		t.Fatalf("counts = %+v, want 2 sessions expired", c)
	}
	for _, id := range ids {
		_, verr := e.stack.Provider.GetVolume(ctx, vols[id])
		v := e.session(tokenAcme, id)
		expired := strings.HasPrefix(id, "old")
		if expired != (v["state"] == "deleted") || expired != (verr != nil) {
			t.Errorf("%s: state %v, volume error %v; want expired=%v", id, v["state"], verr, expired)
		}
	}
	if got := e.events(tokenAcme, "old2"); got[len(got)-1] != "session.expired" {
		t.Fatalf("old2 events = %v", got)
	}
	msg := wantError(t, e.do(http.MethodPost, "/v1/sessions/old1/run", tokenAcme, map[string]any{"code": "true", "language": "shell"}), http.StatusGone, "gone", "")
	if !strings.Contains(msg, "expired after 30 minutes without a run") {
		t.Fatalf("message = %q", msg)
	}
	if got := wantOK(t, e.run(tokenAcme, "new2", "shell", "cat /workspace/id")); got != "new2\n" {
		t.Fatalf("new2 lost its file: %q", got)
	}
	// Nothing the expired sessions had is left running.
	for _, en := range e.liveEntries() {
		if strings.Contains(en.Owner, "old") {
			t.Errorf("live ledger entry of an expired session: %+v", en)
		}
	}
}

// A run racing the cleanup either keeps its session, with every file it
// wrote, or is refused before it starts; the cleanup never deletes a
// volume under a run.
func TestCleanupNeverDeletesARunningSession(t *testing.T) {
	cleanupNeverDeletesARunningSession(t, envConfig{})
}

func cleanupNeverDeletesARunningSession(t *testing.T, ec envConfig) {
	ec = with(ec, envConfig{sessions: "volume_ttl_minutes = 1\nsandbox_idle_minutes = 1"})
	e := newEnv(t, ec)
	ctx := ctxFor(t)
	// From the cleanup's clock every idle session is expired, and no run
	// has been going long enough to be taken for dead: only the session's
	// state keeps a running one alive.
	e.stack.Reaper.Now = func() time.Time { return time.Now().Add(2 * time.Minute) }
	const rounds = 16
	kept, deleted := 0, 0
	for i := range rounds {
		id := "race" + string(rune('a'+i))
		wantOK(t, e.run(tokenAcme, id, "shell", "echo seed > /workspace/seed"))
		// Either may go first, by a few milliseconds either way.
		runDone := make(chan response, 1)
		runDelay, passDelay := rand.IntN(40), rand.IntN(10)
		go func() {
			time.Sleep(time.Duration(runDelay) * time.Millisecond)
			runDone <- e.do(http.MethodPost, "/v1/sessions/"+id+"/run", tokenAcme, map[string]any{
				"language": "shell",
				"code":     "cat /workspace/seed && sleep 0.05 && echo more > /workspace/more && cat /workspace/more",
			})
		}()
		time.Sleep(time.Duration(passDelay) * time.Millisecond)
		if _, err := e.stack.Reaper.Pass(ctx); err != nil {
			t.Fatalf("round %d: pass: %v", i, err)
		}
		r := <-runDone
		sess, err := e.st.GetSession(ctx, sessionKey("acme", id))
		if err != nil {
			t.Fatal(err)
		}
		switch r.status {
		case http.StatusOK:
			if out := wantOK(t, r.json(t)); out != "seed\nmore\n" {
				t.Fatalf("round %d: the run lost files: %q", i, out)
			}
			// The run won; the cleanup may still have deleted the
			// session after it ended, but never during it.
		case http.StatusGone, http.StatusConflict:
			if sess.State != store.SessionDeleted {
				t.Fatalf("round %d: run refused with %d but the session is %s", i, r.status, sess.State)
			}
		default:
			t.Fatalf("round %d: run answered %d %s\n%s", i, r.status, r.body, e.logs.String())
		}
		// Finish what the race left: one more pass expires a session the
		// run kept.
		if _, err := e.stack.Reaper.Pass(ctx); err != nil {
			t.Fatalf("round %d: second pass: %v", i, err)
		}
		if sess, err = e.st.GetSession(ctx, sessionKey("acme", id)); err != nil || sess.State != store.SessionDeleted {
			t.Fatalf("round %d: after two passes the session is %s (%v)", i, sess.State, err)
		}
		if _, err := e.stack.Provider.GetVolume(ctx, sess.VolumeSlug); err == nil {
			t.Fatalf("round %d: a deleted session's volume is still there", i)
		}
		if r.status == http.StatusOK {
			kept++
		} else {
			deleted++
		}
	}
	t.Logf("%d runs won the race, %d were refused", kept, deleted)
	if live := e.liveSandboxes(); len(live) != 0 {
		t.Fatalf("sandboxes left running: %v", live)
	}
	if live := e.liveEntries(); len(live) != 0 {
		t.Fatalf("ledger entries left live: %v", live)
	}
}

// A session held by a run whose process died is taken back by the
// cleanup once no run can still be going.
func TestCleanupEndsStaleRuns(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := ctxFor(t)
	wantOK(t, e.run(tokenAcme, "stuck", "shell", "true"))
	key := sessionKey("acme", "stuck")
	sess, err := e.st.GetSession(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// A run begins and its process dies.
	if _, err := e.st.BeginRun(ctx, key, sess.Version, 30*time.Minute); err != nil {
		t.Fatal(err)
	}
	e.stack.Reaper.Now = func() time.Time { return time.Now().Add(time.Minute) }
	if c, err := e.stack.Reaper.Pass(ctx); err != nil || c.StaleRunsEnded != 0 {
		t.Fatalf("counts = %+v, %v: the run may still be going", c, err)
	}
	e.stack.Reaper.Now = func() time.Time { return time.Now().Add(20 * time.Minute) }
	if c, err := e.stack.Reaper.Pass(ctx); err != nil || c.StaleRunsEnded != 1 {
		t.Fatalf("counts = %+v, %v: want the stale run ended", c, err)
	}
	if got, _ := e.st.GetSession(ctx, key); got.State != store.SessionIdle {
		t.Fatalf("state = %s", got.State)
	}
	wantOK(t, e.run(tokenAcme, "stuck", "shell", "true"))
}

func countOf(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// A run on a session whose deletion has begun is refused with 409; the
// cleanup finishes a deletion that stopped half way, and then runs get 410.
func TestRunOnASessionBeingDeleted(t *testing.T) { runOnASessionBeingDeleted(t, envConfig{}) }

func runOnASessionBeingDeleted(t *testing.T, ec envConfig) {
	e := newEnv(t, ec)
	ctx := ctxFor(t)
	wantOK(t, e.run(tokenAcme, "busy", "shell", "echo x > /workspace/x"))
	if _, err := e.st.BeginDelete(ctx, sessionKey("acme", "busy"), time.Now().AddDate(1, 0, 0)); err != nil {
		t.Fatal(err)
	}
	body := map[string]any{"code": "true", "language": "shell"}
	msg := wantError(t, e.do(http.MethodPost, "/v1/sessions/busy/run", tokenAcme, body), http.StatusConflict, "conflict", "")
	if !strings.Contains(msg, "being deleted") {
		t.Fatalf("message = %q", msg)
	}
	c, err := e.stack.Reaper.Pass(ctx)
	if err != nil || c.DeletionsResumed != 1 {
		t.Fatalf("counts = %+v, %v: want the deletion finished", c, err)
	}
	wantError(t, e.do(http.MethodPost, "/v1/sessions/busy/run", tokenAcme, body), http.StatusGone, "gone", "")
	if live := e.liveSandboxes(); len(live) != 0 {
		t.Fatalf("sandboxes still running: %v", live)
	}
}
