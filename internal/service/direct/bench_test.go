package direct_test

import (
	"bytes"
	"testing"

	"github.com/sandstep/sandstep/client"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/providers"
)

// BenchmarkExec compares a short command through POST /v1/sandboxes/{id}/exec
// (detached, output in files, read back) with the provider's own Exec of the
// same command (the baseline: what a request that held the command's
// output in memory would cost at least).
func BenchmarkExec(b *testing.B) {
	e, acme, sb, d := benchSandbox(b, "")
	ctx := ctxFor(b)
	b.Run("provider", func(b *testing.B) {
		for b.Loop() {
			var out bytes.Buffer
			if _, err := e.stack.Provider.Exec(ctx, d.ProviderID, providers.ExecRequest{Shell: "echo hi", Stdout: &out}); err != nil || out.String() != "hi\n" {
				b.Fatal(err, out.String())
			}
		}
	})
	b.Run("api", func(b *testing.B) {
		for b.Loop() {
			ex, err := acme.Exec(ctx, sb.ID, client.ExecRequest{Command: "echo hi"})
			if err != nil || ex.Stdout == nil || *ex.Stdout != "hi\n" {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkArtifacts is GET /v1/sandboxes/{id}/artifacts over a folder of
// 200 files in 10 subfolders, next to the provider's own Exec of `true`
// in the same sandbox (the baseline: the one command the listing runs,
// without its find or the answer).
func BenchmarkArtifacts(b *testing.B) {
	mk := `for d in 0 1 2 3 4 5 6 7 8 9; do mkdir -p /workspace/artifacts/d$d; for f in $(seq 1 20); do echo $f > /workspace/artifacts/d$d/f$f.txt; done; done`
	e, acme, sb, d := benchSandbox(b, mk)
	ctx := ctxFor(b)
	b.Run("provider-true", func(b *testing.B) {
		for b.Loop() {
			if res, err := e.stack.Provider.Exec(ctx, d.ProviderID, providers.ExecRequest{Shell: "true"}); err != nil || res.ExitCode != 0 {
				b.Fatal(err)
			}
		}
	})
	b.Run("api-list", func(b *testing.B) {
		for b.Loop() {
			files, _, err := acme.Artifacts(ctx, sb.ID)
			if err != nil || len(files) != 200 {
				b.Fatal(len(files), err)
			}
		}
	})
}

// benchSandbox is a stack and a sandbox of tenant acme in it, after setup
// (a shell command, or none), with its record.
func benchSandbox(b *testing.B, setup string) (*env, *client.Client, client.Sandbox, store.DirectSandbox) {
	e := newEnv(b, "")
	ctx := ctxFor(b)
	acme := e.client(tokenAcme)
	sb, err := acme.CreateSandbox(ctx, client.CreateRequest{TTLSeconds: 3600})
	if err != nil {
		b.Fatal(err)
	}
	if setup != "" {
		if code, err := acme.Run(ctx, sb.ID, client.ExecRequest{Command: setup}, nil, nil); err != nil || code != 0 {
			b.Fatal(code, err)
		}
	}
	d, err := e.st.DirectGet(ctx, sb.ID)
	if err != nil {
		b.Fatal(err)
	}
	return e, acme, sb, d
}
