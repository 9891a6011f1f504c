package main

import (
	"context"
	"fmt"
	"io"
	"runtime"

	"github.com/sandstep/sandstep/internal/service/version"
	"github.com/sandstep/sandstep/providers"
)

func runVersion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if _, err := positional(newFlags("version", stdout, stderr), args); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "sandstep %s (plugin API v%d, %s, %s/%s)\n", version.Version, providers.APIVersion, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}
