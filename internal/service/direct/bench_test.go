package direct_test

import (
	"bytes"
	"testing"

	"github.com/sandstep/sandstep/client"
	"github.com/sandstep/sandstep/providers"
)

// BenchmarkExec compares a short command through POST /v1/sandboxes/{id}/exec
// (detached, output in files, read back) with the provider's own Exec of the
// same command (the baseline: what a request that held the command's
// output in memory would cost at least).
func BenchmarkExec(b *testing.B) {
	e := newEnv(b, "")
	ctx := ctxFor(b)
	acme := e.client(tokenAcme)
	sb, err := acme.CreateSandbox(ctx, client.CreateRequest{TTLSeconds: 3600})
	if err != nil {
		b.Fatal(err)
	}
	d, err := e.st.DirectGet(ctx, sb.ID)
	if err != nil {
		b.Fatal(err)
	}
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
