package sessions

import (
	"time"

	"github.com/sandstep/sandstep/providers"
)

// SnapshotSlug names the dependency snapshot of the configured list.
func (s *Service) SnapshotSlug() string { return s.deps.slug }

// SnapshotBuilds counts the builds this Service asked the provider for.
func (s *Service) SnapshotBuilds() int64 { return s.snapshotBuilds.Load() }

// StatefulRequest is the exec of a stateful run of code.
func StatefulRequest(language, code string) providers.ExecRequest {
	return statefulRequest(language, code, "bench", nil, time.Minute)
}
