package sessions

// SnapshotSlug names the dependency snapshot of the configured list.
func (s *Service) SnapshotSlug() string { return s.deps.slug }

// SnapshotBuilds counts the builds this Service asked the provider for.
func (s *Service) SnapshotBuilds() int64 { return s.snapshotBuilds.Load() }
