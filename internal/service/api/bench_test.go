package api_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sandstep/sandstep/internal/service/store"
)

// BenchmarkStatusReads measures GET /v1/jobs/{id} end to end: a real HTTP
// server on 127.0.0.1, token check, one consistent read from DynamoDB
// Local, JSON out.
func BenchmarkStatusReads(b *testing.B) {
	e := newEnv(b)
	e.submit(tokenAcme, "bench-1")
	client := e.srv.Client()
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	url := e.srv.URL + "/v1/jobs/bench-1"
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			req.Header.Set("Authorization", "Bearer "+tokenAcme)
			res, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				b.Errorf("status %d", res.StatusCode)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reads/s")
}

// BenchmarkRouting measures the handler alone, in process, on routes that
// never reach the store: what routing, the middleware and the JSON answer
// cost per request.
func BenchmarkRouting(b *testing.B) {
	e := newEnvOn(b, store.NewLocal(closedURL(b), "none-"))
	for _, tc := range []struct{ name, method, path, token string }{
		{"providers", http.MethodGet, "/v1/providers", tokenAcme},
		{"not_found", http.MethodGet, "/v1/nothing/here", tokenAcme},
		{"method_not_allowed", http.MethodDelete, "/v1/jobs/x", tokenAcme},
		{"unauthenticated", http.MethodGet, "/v1/jobs/x", ""},
	} {
		b.Run(tc.name, func(b *testing.B) {
			req := httptest.NewRequest(tc.method, tc.path, nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				e.handler.ServeHTTP(w, req)
				if w.Code < 200 {
					b.Fatal(w.Code)
				}
			}
		})
	}
}
