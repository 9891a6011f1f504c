package sessions_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sandstep/sandstep/internal/testkit/apitest"
)

// FuzzRun sends arbitrary bodies to POST /v1/sessions/{sid}/run through the
// real handler of a local stack: the real store, and the local provider
// running what decodes as a run in a real sandbox, so that what the API
// accepts is shown to run. Timeouts are short so that a fuzzed program
// cannot hold the loop.
func FuzzRun(f *testing.F) {
	e := newEnv(f, envConfig{sessions: "timeout_seconds = 2\nmax_timeout_seconds = 3\nsync_wait = \"10s\""})
	h := e.stack.Handler
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/v1/sessions/fuzz/run", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tokenAcme)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		apitest.Validate(t, h).ServeHTTP(rec, req)
		m := apitest.CheckAnswer(t, rec, "POST /v1/sessions/fuzz/run")
		if rec.Code == http.StatusOK || rec.Code == http.StatusAccepted {
			if m["run_id"] == nil || m["session_id"] != "fuzz" || m["status"] == nil {
				t.Fatalf("a run answered %d without its run: %s", rec.Code, rec.Body.Bytes())
			}
		}
	})
}
