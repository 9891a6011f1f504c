package portproxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/sandstep/sandstep/internal/service/portproxy"
)

// A provider's own URL (Deno's exposeHttp domain, a Modal tunnel) is
// routed by its host name: the forward carries the target's host, the
// path under the port's prefix, and none of sandstep's credentials.
func TestForwardToAProvidersURL(t *testing.T) {
	type seen struct{ host, path, query, auth, cookie string }
	got := make(chan seen, 1)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Host, r.URL.Path, r.URL.RawQuery, r.Header.Get("Authorization"), r.Header.Get("Cookie")}
		_, _ = io.WriteString(w, "served")
	}))
	defer target.Close()
	front, prefix := proxyTo(t, target.URL)
	req, _ := http.NewRequest("GET", front.URL+prefix+"/app/page?token=secret&x=1", nil)
	req.Header.Set("Authorization", "Bearer sst_abc")
	req.Header.Set("Cookie", "sandstep_port=secret")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(body) != "served" {
		t.Fatalf("answer %d %q", res.StatusCode, body)
	}
	s := <-got
	u, _ := url.Parse(target.URL)
	if s.host != u.Host || s.path != "/app/page" || s.query != "x=1" || s.auth != "" || s.cookie != "" {
		t.Fatalf("the provider's server saw %+v; want host %s, path /app/page, no token, no credentials", s, u.Host)
	}
}

// An app's own cookies reach it and the ones it sets are scoped to its
// port's prefix (sandstep's one origin serves many apps); sandstep's URL
// token cookie never reaches it; an encoded "/" in the path stays encoded.
func TestAppCookiesAndPathsPassThrough(t *testing.T) {
	type seen struct{ rawPath, cookie string }
	got := make(chan seen, 1)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.URL.EscapedPath(), r.Header.Get("Cookie")}
		http.SetCookie(w, &http.Cookie{Name: "session", Value: "42", Path: "/", Domain: "app.example"})
		http.SetCookie(w, &http.Cookie{Name: "cart", Value: "7", Path: "/shop"})
		http.SetCookie(w, &http.Cookie{Name: portproxy.CookiePrefix + "sb1", Value: "forged", Path: "/"})
	}))
	defer target.Close()
	front, prefix := proxyTo(t, target.URL)
	req, _ := http.NewRequest("GET", front.URL+prefix+"/files/a%2Fb", nil)
	req.Header.Set("Cookie", "session=41; sandstep_sb1=urltoken; theme=dark")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	s := <-got
	if s.rawPath != "/files/a%2Fb" || s.cookie != "session=41; theme=dark" {
		t.Errorf("the app saw path %q and cookies %q", s.rawPath, s.cookie)
	}
	set := res.Header.Values("Set-Cookie")
	want := []string{"session=42; Path=" + prefix + "/", "cart=7; Path=" + prefix + "/shop"}
	if len(set) != len(want) || set[0] != want[0] || set[1] != want[1] {
		t.Errorf("Set-Cookie %q, want %q", set, want)
	}
}

// proxyTo serves a proxy to target under a port's prefix, as the API
// mounts it, and returns its server and the prefix; a forward that fails
// fails the test.
func proxyTo(t *testing.T, target string) (*httptest.Server, string) {
	t.Helper()
	prefix := "/v1/sandboxes/sb1/ports/8000"
	h, err := portproxy.New(target, prefix, func(w http.ResponseWriter, _ *http.Request, err error) {
		t.Errorf("forward failed: %v", err)
		w.WriteHeader(http.StatusBadGateway)
	})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(h)
	t.Cleanup(front.Close)
	return front, prefix
}
