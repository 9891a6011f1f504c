package main

import (
	"context"
	"io"

	"github.com/sandstep/sandstep/internal/testkit/fakemodal"
)

// runFakeModal serves the fake Modal (Modal's own gRPC services, commands
// under bubblewrap) for manual tests of the modal provider: `sandstep
// fake-modal`, then point [provider.modal] server_url at the URL it prints.
func runFakeModal(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return fakemodal.Main(ctx, args, stdout, stderr)
}
