package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
)

// A limit reached anywhere below a handler (the sandbox owner, job
// submission) reaches the client as 429 naming it, however it was wrapped.
func TestALimitIsA429NamingIt(t *testing.T) {
	w := httptest.NewRecorder()
	c := &call{rec: &recorder{ResponseWriter: w}}
	fail(w, c, fmt.Errorf("acquire: %w", &store.LimitError{Limit: "concurrent_sandboxes", Max: 5, Scope: "tenant", RetryAfter: 1500 * time.Millisecond}))
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "2" {
		t.Fatalf("status %d, Retry-After %q; want 429 and 2 (1.5 s rounded up)", w.Code, w.Header().Get("Retry-After"))
	}
	var body struct{ Error map[string]any }
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	er := body.Error
	if er["code"] != CodeLimitExceeded || er["limit"] != "concurrent_sandboxes" || er["max"] != float64(5) || er["scope"] != "tenant" ||
		!strings.Contains(er["message"].(string), "concurrent_sandboxes (5)") || c.cause != nil {
		t.Fatalf("answer %s (cause %v)", w.Body, c.cause)
	}
}
