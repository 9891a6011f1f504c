package api_test

import (
	"io"
	"net/http"
	"testing"
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
