package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/api"
	"github.com/sandstep/sandstep/internal/service/sessions"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
)

// newSessionsEnv serves the API with a sessions service of the given
// [sessions] table. It has no sandbox provider: these tests cover what the
// API decides before code runs (the sessions package runs code).
func newSessionsEnv(t testing.TB, table string, adjust ...func(*api.Options)) *testEnv {
	t.Helper()
	dbenv := testddb.ForTests(t)
	st := store.NewLocal(dbenv.Endpoint, dbenv.Prefix)
	cfg, err := config.Parse([]byte(table), "config.toml", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	svc, err := sessions.New(sessions.Options{Config: cfg, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	return newEnvOn(t, st, append([]func(*api.Options){func(o *api.Options) { o.Sessions = svc }}, adjust...)...)
}

func TestSessionsDisabled(t *testing.T) {
	for name, table := range map[string]string{"no section": "", "enabled = false": "[sessions]\nenabled = false\n"} {
		t.Run(name, func(t *testing.T) {
			e := newSessionsEnv(t, table)
			for _, r := range []response{
				e.post("/v1/sessions/s1/run", tokenAcme, `{"code":"1","language":"javascript"}`),
				e.get("/v1/sessions/s1", tokenAcme),
				e.post("/v1/sessions/s1", tokenAcme, ""),
				e.do(http.MethodDelete, "/v1/sessions/s1", tokenAcme, nil),
				e.get("/v1/sessions/s1/events", tokenAcme),
				e.get("/v1/sessions/s1/runs/r1", tokenAcme),
				e.get("/v1/sessions", tokenAcme),
			} {
				e := wantError(t, r, http.StatusNotFound, "not_found", "")
				if e["message"] != "sessions are not enabled on this server" {
					t.Fatalf("message = %v", e["message"])
				}
			}
		})
	}
	// Without a service at all, as in a deployment that wires none.
	e := newEnv(t)
	wantError(t, e.get("/v1/sessions/s1", tokenAcme), http.StatusNotFound, "not_found", "")
}

func TestSessionsNeedAToken(t *testing.T) {
	e := newSessionsEnv(t, "[sessions]\nenabled = true\n")
	wantError(t, e.get("/v1/sessions/s1", ""), http.StatusUnauthorized, "unauthenticated", "")
}

func TestRunBadInput(t *testing.T) {
	e := newSessionsEnv(t, "[sessions]\nenabled = true\nmax_timeout_seconds = 120\n")
	big := strings.Repeat("x", sessions.MaxCodeBytes+1)
	for _, tc := range []struct {
		name, path, body string
		status           int
		code, field      string
	}{
		{"code missing", "/v1/sessions/s1/run", `{"language":"javascript"}`, 400, "invalid_argument", "code"},
		{"code empty", "/v1/sessions/s1/run", `{"code":"","language":"javascript"}`, 400, "invalid_argument", "code"},
		{"code not a string", "/v1/sessions/s1/run", `{"code":1,"language":"javascript"}`, 400, "invalid_argument", "code"},
		{"code over 256 KiB", "/v1/sessions/s1/run", fmt.Sprintf(`{"code":%q,"language":"shell"}`, big), 413, "payload_too_large", "code"},
		{"body over the limit", "/v1/sessions/s1/run", fmt.Sprintf(`{"code":%q,"language":"shell"}`, strings.Repeat("\\u0000", (2<<20)/6+1)), 413, "payload_too_large", "code"},
		{"language missing", "/v1/sessions/s1/run", `{"code":"1"}`, 400, "invalid_argument", "language"},
		{"language unknown", "/v1/sessions/s1/run", `{"code":"1","language":"cobol"}`, 400, "invalid_argument", "language"},
		{"timeout zero", "/v1/sessions/s1/run", `{"code":"1","language":"python","timeout_seconds":0}`, 400, "invalid_argument", "timeout_seconds"},
		{"timeout fractional", "/v1/sessions/s1/run", `{"code":"1","language":"python","timeout_seconds":1.5}`, 400, "invalid_argument", "timeout_seconds"},
		{"timeout a string", "/v1/sessions/s1/run", `{"code":"1","language":"python","timeout_seconds":"5"}`, 400, "invalid_argument", "timeout_seconds"},
		{"timeout over the maximum", "/v1/sessions/s1/run", `{"code":"1","language":"python","timeout_seconds":121}`, 400, "invalid_argument", "timeout_seconds"},
		{"unknown field", "/v1/sessions/s1/run", `{"code":"1","language":"python","cwd":"/"}`, 400, "invalid_argument", "cwd"},
		{"not JSON", "/v1/sessions/s1/run", `code=1`, 400, "invalid_argument", ""},
		{"two values", "/v1/sessions/s1/run", `{"code":"1","language":"python"} {}`, 400, "invalid_argument", ""},
		{"session id with a bad character", "/v1/sessions/a$b/run", `{"code":"1","language":"python"}`, 400, "invalid_argument", "session_id"},
		{"session id too long", "/v1/sessions/" + strings.Repeat("s", 65) + "/run", `{"code":"1","language":"python"}`, 400, "invalid_argument", "session_id"},
		{"session id ..", "/v1/sessions/../run", `{"code":"1","language":"python"}`, 400, "invalid_argument", "session_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, e.post(tc.path, tokenAcme, tc.body), tc.status, tc.code, tc.field)
		})
	}
	wantError(t, e.get("/v1/sessions/s1/runs/r$1", tokenAcme), http.StatusBadRequest, "invalid_argument", "run_id")
	wantError(t, e.get("/v1/sessions/s1/events?after=-1", tokenAcme), http.StatusBadRequest, "invalid_argument", "after")
	wantError(t, e.do(http.MethodPut, "/v1/sessions/s1", tokenAcme, nil), http.StatusMethodNotAllowed, "method_not_allowed", "")
}

// Sessions belong to their tenant: another tenant's session and runs are
// not found, and the same id is another session for it.
func TestSessionsOfAnotherTenantAreNotFound(t *testing.T) {
	e := newSessionsEnv(t, "[sessions]\nenabled = true\n")
	r := e.post("/v1/sessions/shared", tokenAcme, "")
	wantStatus(t, r, http.StatusCreated)
	v := r.json(t)
	if v["session_id"] != "shared" || v["state"] != "idle" || v["sandbox"] != nil || v["mode"] != "lazy" ||
		v["volume"].(map[string]any)["mount_path"] != "/workspace" || v["expires_at"] == nil {
		t.Fatalf("opened session = %v", v)
	}
	wantStatus(t, e.get("/v1/sessions/shared", tokenAcme), http.StatusOK)
	wantError(t, e.get("/v1/sessions/shared", tokenGlobex), http.StatusNotFound, "not_found", "")
	wantError(t, e.get("/v1/sessions/shared/events", tokenGlobex), http.StatusNotFound, "not_found", "")
	wantError(t, e.get("/v1/sessions/shared/runs/01abc", tokenAcme), http.StatusNotFound, "not_found", "")
	wantError(t, e.get("/v1/sessions/nope", tokenAcme), http.StatusNotFound, "not_found", "")

	theirs := e.post("/v1/sessions/shared", tokenGlobex, "")
	wantStatus(t, theirs, http.StatusCreated)
	if theirs.json(t)["volume"].(map[string]any)["slug"] == v["volume"].(map[string]any)["slug"] {
		t.Fatal("two tenants' sessions of one id share a volume")
	}
	again := e.post("/v1/sessions/shared", tokenAcme, "")
	wantStatus(t, again, http.StatusOK)

	evs := e.get("/v1/sessions/shared/events", tokenAcme).json(t)
	list := evs["events"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["type"] != "session.created" || evs["next_after"] != float64(1) {
		t.Fatalf("events = %v", evs)
	}
	// The shape of a job's events: seq, type, time, then the payload's
	// members.
	ev := list[0].(map[string]any)
	if _, err := time.Parse(time.RFC3339, fmt.Sprint(ev["time"])); err != nil || ev["seq"] != float64(1) ||
		ev["volume"] != v["volume"].(map[string]any)["slug"] || ev["at"] != nil || ev["data"] != nil {
		t.Fatalf("session event = %v", ev)
	}
	if got := e.get("/v1/sessions/shared/events?after=1", tokenAcme).json(t); len(got["events"].([]any)) != 0 {
		t.Fatalf("events after 1 = %v", got)
	}
}
