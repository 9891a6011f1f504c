package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/apitest"
)

// FuzzSubmit sends arbitrary bodies to POST /v1/jobs through the real
// handler over a real store.
func FuzzSubmit(f *testing.F) {
	e := newEnv(f)
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		req := httptest.NewRequest(http.MethodPost, "/v1/jobs", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tokenAcme)
		req.Header.Set("Content-Type", contentType)
		rec := httptest.NewRecorder()
		apitest.Validate(t, e.handler).ServeHTTP(rec, req)
		m := apitest.CheckAnswer(t, rec, "POST /v1/jobs")
		if rec.Code >= 400 {
			// A field named is one of the request's, or a key the client
			// sent, as it sent it.
			var answer struct {
				Error struct{ Field string } `json:"error"`
			}
			_ = json.Unmarshal(rec.Body.Bytes(), &answer)
			// The first JSON value, as the handler reads it.
			var sent map[string]json.RawMessage
			_ = json.NewDecoder(bytes.NewReader(body)).Decode(&sent)
			if f := answer.Error.Field; f != "" && !submitFields[f] {
				if _, ok := sent[f]; !ok {
					t.Fatalf("error names field %q, which the body %q does not have", f, body)
				}
			}
		}
		if rec.Code == http.StatusAccepted || rec.Code == http.StatusOK {
			var sent struct {
				JobID *string `json:"job_id"`
			}
			_ = json.Unmarshal(body, &sent)
			if id, _ := m["job_id"].(string); id == "" || sent.JobID != nil && id != *sent.JobID {
				t.Fatalf("accepted %q as job %q", body, m["job_id"])
			}
		}
	})
}

var submitFields = map[string]bool{"query": true, "mode": true, "optimization": true, "seed_urls": true, "job_id": true}

// queryRoutes are the routes whose path and query parameters are fuzzed.
var queryRoutes = []string{
	"/v1/jobs/%s/events", "/v1/jobs/%s", "/v1/jobs/%s/report", "/v1/sessions/%s/events",
	"/v1/sessions/%s", "/v1/sessions/%s/runs/01run", "/v1/sessions/fz/runs/%s", "/healthz", "/v1/providers",
}

// FuzzQuery sends GETs with arbitrary ids, query parameters and the
// headers that change an answer (Accept, Last-Event-ID) through the real
// handler, streams on, over a real store. The job fz-1 exists and has
// ended, so its stream ends at once; the session fz exists.
func FuzzQuery(f *testing.F) {
	e := newSessionsEnv(f, "[sessions]\nenabled = true\n", streaming(0))
	ctx := ctxFor(f)
	e.submit(tokenAcme, "fz-1")
	appendEvents(f, e.store, acmeKey("fz-1"), 1, 5)
	if _, err := e.store.SetStatus(ctx, acmeKey("fz-1"), nil, store.StatusRunning); err != nil {
		f.Fatal(err)
	}
	if err := e.store.PutReport(ctx, acmeKey("fz-1"), "# Report\n\nFuzzed [1].", true); err != nil {
		f.Fatal(err)
	}
	if _, err := e.store.SetStatus(ctx, acmeKey("fz-1"), nil, store.StatusSucceeded); err != nil {
		f.Fatal(err)
	}
	if r := e.post("/v1/sessions/fz", tokenAcme, ""); r.status != http.StatusCreated {
		f.Fatalf("open session: %d %s", r.status, r.body)
	}
	f.Fuzz(func(t *testing.T, route uint8, id, rawQuery, accept, lastEventID string) {
		path := queryRoutes[int(route)%len(queryRoutes)]
		if strings.Contains(path, "%s") {
			path = fmt.Sprintf(path, url.PathEscape(id))
		}
		req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1"+path+"?"+rawQuery, nil)
		if err != nil {
			return // not a request a client can send
		}
		req.Header.Set("Authorization", "Bearer "+tokenAcme)
		req.Header.Set("Accept", accept)
		if lastEventID != "" {
			req.Header.Set("Last-Event-ID", lastEventID)
		}
		rec := httptest.NewRecorder()
		apitest.Validate(t, e.handler).ServeHTTP(rec, req)
		apitest.CheckAnswer(t, rec, "GET "+path+"?"+rawQuery)
	})
}
