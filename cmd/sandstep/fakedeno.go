package main

import (
	"context"
	"io"

	"github.com/sandstep/sandstep/internal/testkit/fakedeno"
)

// runFakeDeno serves the contract-faithful fake Deno Sandbox for manual
// tests of the deno provider: `sandstep fake-deno`, then point
// [provider.deno] console_url and sandbox_url at it.
func runFakeDeno(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return fakedeno.Main(ctx, args, stdout, stderr)
}
