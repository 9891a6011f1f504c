package main

import (
	"context"
	"io"

	"github.com/sandstep/sandstep/internal/testkit/fakesandy"
)

// runFakeSandy serves the contract-faithful fake Sandy for manual tests of
// the sandy provider: `sandstep fake-sandy`, then point [provider.sandy]
// base_url at it.
func runFakeSandy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return fakesandy.Main(ctx, args, stdout, stderr)
}
