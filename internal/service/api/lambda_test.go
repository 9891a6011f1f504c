package api_test

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/api"
)

// gatewayEvent is what API Gateway (HTTP API, payload 2.0, $default stage)
// sends for a request: lower-case header names, the query string raw.
func gatewayEvent(method, path, query, token, body string, b64 bool) events.APIGatewayV2HTTPRequest {
	ev := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "$default", RawPath: path, RawQueryString: query,
		Headers: map[string]string{"host": "api.example.com", "user-agent": "test"},
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			Stage: "$default", DomainName: "api.example.com", RequestID: "req-1",
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method: method, Path: path, Protocol: "HTTP/1.1", SourceIP: "203.0.113.9",
			},
		},
	}
	if token != "" {
		ev.Headers["authorization"] = "Bearer " + token
	}
	if body != "" {
		ev.Headers["content-type"] = "application/json"
		ev.Body = body
		if b64 {
			ev.Body = base64.StdEncoding.EncodeToString([]byte(body))
			ev.IsBase64Encoded = true
		}
	}
	return ev
}

func (e *testEnv) viaLambda(ev events.APIGatewayV2HTTPRequest) response {
	e.t.Helper()
	res, err := api.LambdaHandler(e.handler)(ctxFor(e.t), ev)
	if err != nil {
		e.t.Fatal(err)
	}
	body := []byte(res.Body)
	if res.IsBase64Encoded {
		if body, err = base64.StdEncoding.DecodeString(res.Body); err != nil {
			e.t.Fatal(err)
		}
	}
	h := http.Header{}
	for k, v := range res.Headers {
		h.Set(k, v)
	}
	return response{status: res.StatusCode, header: h, body: body}
}

// sameResponse asserts that the Lambda path answered as net/http did.
func sameResponse(t *testing.T, what string, viaHTTP, viaLambda response, headers ...string) {
	t.Helper()
	if viaHTTP.status != viaLambda.status || string(viaHTTP.body) != string(viaLambda.body) {
		t.Fatalf("%s:\nnet/http %d %s\nlambda   %d %s", what, viaHTTP.status, viaHTTP.body, viaLambda.status, viaLambda.body)
	}
	for _, h := range append([]string{"Content-Type", "Content-Length"}, headers...) {
		if viaHTTP.header.Get(h) != viaLambda.header.Get(h) {
			t.Fatalf("%s: %s %q via net/http, %q via lambda", what, h, viaHTTP.header.Get(h), viaLambda.header.Get(h))
		}
	}
}

func TestLambdaRoundTrip(t *testing.T) {
	e := newEnv(t)
	const body = `{"query":"heat pumps","mode":"max","seed_urls":["https://example.com/a?x=1&y=2"],"job_id":"%s"}`

	// A POST with a base64 body, and the same with a plain one.
	httpRes := e.post("/v1/jobs", tokenAcme, strings.ReplaceAll(body, "%s", "rt-http"))
	lamRes := e.viaLambda(gatewayEvent("POST", "/v1/jobs", "", tokenAcme, strings.ReplaceAll(body, "%s", "rt-lmbd"), true))
	lamRes.body = []byte(strings.ReplaceAll(string(lamRes.body), "rt-lmbd", "rt-http"))
	sameResponse(t, "POST /v1/jobs", httpRes, lamRes)
	wantStatus(t, lamRes, http.StatusAccepted)
	plain := e.viaLambda(gatewayEvent("POST", "/v1/jobs", "", tokenAcme, strings.ReplaceAll(body, "%s", "rt-lmbd"), false))
	wantStatus(t, plain, http.StatusOK) // the same request again
	if a, b := e.get("/v1/jobs/rt-lmbd", tokenAcme), e.get("/v1/jobs/rt-http", tokenAcme); a.status != 200 || b.status != 200 {
		t.Fatalf("jobs: %s / %s", a.body, b.body)
	}

	appendEvents(t, e.store, acmeKey("rt-http"), 1, 5)
	for _, tc := range []struct {
		method, path, query, token, body string
		headers                          []string
	}{
		{"GET", "/v1/jobs/rt-http/events", "after=1&limit=2", tokenAcme, "", nil},
		{"GET", "/v1/jobs/rt-http/events", "limit=0", tokenAcme, "", nil},
		{"GET", "/v1/jobs/rt-http", "", tokenAcme, "", nil},
		{"GET", "/v1/jobs", "limit=1", tokenAcme, "", nil},
		{"GET", "/v1/jobs", "status=failed,nope", tokenAcme, "", nil},
		{"POST", "/v1/jobs", "", tokenAcme, `{"query":"q","mode":"huge"}`, nil},
		{"POST", "/v1/jobs", "", tokenAcme, `{"query":"q","job_id":"rt-http"}`, nil},
		{"GET", "/v1/jobs/rt-http/report", "", tokenAcme, "", nil},
		{"GET", "/v1/jobs/rt-http", "", "", "", []string{"WWW-Authenticate"}},
		{"DELETE", "/v1/jobs/rt-http", "", tokenAcme, "", []string{"Allow"}},
		{"GET", "/v2/nothing", "", tokenAcme, "", nil},
		{"GET", "/v1/providers", "", tokenAcme, "", nil},
		{"GET", "/healthz", "", "", "", nil},
	} {
		path := tc.path
		if tc.query != "" {
			path += "?" + tc.query
		}
		var httpRes response
		if tc.body != "" {
			httpRes = e.post(path, tc.token, tc.body)
		} else {
			httpRes = e.do(tc.method, path, tc.token, nil)
		}
		for _, b64 := range []bool{false, true} {
			lamRes := e.viaLambda(gatewayEvent(tc.method, tc.path, tc.query, tc.token, tc.body, b64))
			sameResponse(t, tc.method+" "+path, httpRes, lamRes, tc.headers...)
		}
	}

	// On a named stage the path carries the stage first.
	ev := gatewayEvent("GET", "/prod/v1/jobs/rt-http/events", "after=4", tokenAcme, "", false)
	ev.RequestContext.Stage = "prod"
	sameResponse(t, "staged GET", e.get("/v1/jobs/rt-http/events?after=4", tokenAcme), e.viaLambda(ev))

	// A body that is not base64 when it says so is refused, as JSON.
	bad := gatewayEvent("POST", "/v1/jobs", "", tokenAcme, `{"query":"q"}`, false)
	bad.IsBase64Encoded = true
	wantError(t, e.viaLambda(bad), http.StatusBadRequest, "invalid_argument", "")
}

// The adapter itself: cookies both ways, the caller's address, repeated
// response headers, binary bodies as base64, no body for HEAD.
func TestLambdaAdapter(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie("session")
		if err != nil || c.Value != "abc" || r.RemoteAddr != "203.0.113.9:0" || r.Host != "api.example.com" ||
			r.URL.Query().Get("q") != "a b" || r.URL.Path != "/x/y z" {
			http.Error(w, "request not rebuilt: "+r.RemoteAddr+" "+r.Host+" "+r.URL.String(), http.StatusTeapot)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: "a", Value: "1"})
		http.SetCookie(w, &http.Cookie{Name: "b", Value: "2"})
		w.Header().Add("Vary", "Accept")
		w.Header().Add("Vary", "Authorization")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte{0xff, 0x00, 0xfe})
	})
	ev := gatewayEvent("GET", "/x/y%20z", "q=a+b", "", "", false)
	ev.Cookies = []string{"session=abc", "other=1"}
	res, err := api.LambdaHandler(h)(ctxFor(t), ev)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusCreated || !res.IsBase64Encoded || res.Body != base64.StdEncoding.EncodeToString([]byte{0xff, 0x00, 0xfe}) {
		t.Fatalf("response = %+v", res)
	}
	if strings.Join(res.Cookies, ";") != "a=1;b=2" || res.Headers["Vary"] != "Accept, Authorization" || res.Headers["Set-Cookie"] != "" {
		t.Fatalf("headers %v cookies %v", res.Headers, res.Cookies)
	}
	ev.RequestContext.HTTP.Method = "HEAD"
	if res, _ := api.LambdaHandler(h)(ctxFor(t), ev); res.StatusCode != http.StatusCreated || res.Body != "" {
		t.Fatalf("HEAD = %+v", res)
	}
}

// The body limits of [server] hold behind API Gateway as they do here, with
// the same answer.
func TestLambdaBodyLimits(t *testing.T) {
	sc := config.DefaultServer()
	sc.MaxBodyBytes = 2048
	e := newEnv(t, withServer(sc))
	big := `{"query":"` + strings.Repeat("x", 4000) + `"}`
	for _, b64 := range []bool{false, true} {
		lamRes := e.viaLambda(gatewayEvent("POST", "/v1/jobs", "", tokenAcme, big, b64))
		er := wantError(t, lamRes, http.StatusRequestEntityTooLarge, "payload_too_large", "")
		if msg, _ := er["message"].(string); !strings.Contains(msg, "2048 bytes") || !strings.Contains(msg, "server.max_body_bytes") {
			t.Fatalf("message %q does not name the limit", msg)
		}
		sameResponse(t, "a body over the limit", e.post("/v1/jobs", tokenAcme, big), lamRes)
	}
	// Just within the limit, the same request is taken.
	ok := `{"query":"` + strings.Repeat("x", 2000) + `","job_id":"lim-1"}`
	wantStatus(t, e.viaLambda(gatewayEvent("POST", "/v1/jobs", "", tokenAcme, ok, false)), http.StatusAccepted)
}
