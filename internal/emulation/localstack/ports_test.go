package localstack_test

import (
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/testkit/fakedeno"
	"github.com/sandstep/sandstep/internal/testkit/fakemodal"
)

// TestRemoteProvidersExposePorts: a direct sandbox's expose_ports on Modal
// and Deno come back as the provider's own URLs in public_urls (a Modal
// tunnel, a Deno exposeHttp domain; README, "Direct sandboxes", says why),
// GET /v1/providers declares the capability and counts the sandbox's
// create and cleanup, and nothing is left running at the provider.
func TestRemoteProvidersExposePorts(t *testing.T) {
	for _, name := range []string{"modal", "deno"} {
		t.Run(name, func(t *testing.T) {
			var fm *fakemodal.Running
			var fd *fakedeno.Running
			o := stackOpts{provider: name}
			var live func() []string
			if name == "modal" {
				fm = startFakeModal(t)
				o.modalURL, live = fm.URL, fm.Sandboxes
			} else {
				fd = startFakeDeno(t)
				o.deno, live = fd, fd.Running
			}
			s := newStackWith(t, o)
			code, prov := s.do(t, "GET", "/v1/providers", nil)
			if code != 200 || prov["active"].(map[string]any)["capabilities"].(map[string]any)["public_url"] != true {
				t.Fatalf("GET /v1/providers = %d %v; want the public-url capability", code, prov)
			}
			counts0 := prov["sandboxes"].(map[string]any)

			code, sb := s.do(t, "POST", "/v1/sandboxes", map[string]any{"ttl_seconds": 600, "expose_ports": []int{8080}})
			if code != 201 {
				t.Fatalf("create = %d %v", code, sb)
			}
			id := sb["id"].(string)
			url, _ := sb["public_urls"].(map[string]any)["8080"].(string)
			ids := live()
			if len(ids) != 1 {
				t.Fatalf("the fake runs %v, want the one sandbox", ids)
			}
			switch name {
			case "modal":
				if !strings.HasPrefix(url, "https://") || !strings.HasSuffix(url, "-8080.modal.fake.invalid") {
					t.Errorf("public_urls[8080] = %q, want the Modal tunnel's URL", url)
				}
			case "deno":
				want := ""
				for domain, target := range fd.Exposed(ids[0]) {
					if target == "port:8080" {
						want = "https://" + domain
					}
				}
				if want == "" || url != want {
					t.Errorf("public_urls[8080] = %q, want Deno's exposed domain %q", url, want)
				}
			}
			if code, got := s.do(t, "GET", "/v1/sandboxes/"+id, nil); code != 200 || got["public_urls"].(map[string]any)["8080"] != url {
				t.Errorf("GET = %d, public_urls %v; want the create's", code, got["public_urls"])
			}
			if code, _ := s.do(t, "DELETE", "/v1/sandboxes/"+id, nil); code/100 != 2 {
				t.Fatalf("delete = %d", code)
			}
			if ids := live(); len(ids) != 0 {
				t.Errorf("still running at the fake after delete: %v", ids)
			}
			_, prov = s.do(t, "GET", "/v1/providers", nil)
			counts := prov["sandboxes"].(map[string]any)
			for k, want := range map[string]float64{"created": 1, "cleaned_up": 1, "failed": 0} {
				if d := counts[k].(float64) - counts0[k].(float64); d != want {
					t.Errorf("%s moved by %v, want %v (%v -> %v)", k, d, want, counts0, counts)
				}
			}
		})
	}
}
